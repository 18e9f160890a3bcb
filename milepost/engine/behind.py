"""Appending behind a run another process drives.

A process that does not drive a run (`milepost cancel`, `retry`, `skip` or `approve` on a
local database while `milepost run` drives it in another terminal) reads the run's log,
has core build what it asks for on that state, and appends it only if the log is still
where it was read (`expect`); the driver folds it and decides on its next look. Nothing
is decided here. A log that moved in between (`port.LogMoved`), or a command an event
settles that moved (`port.ClaimMoved`), is read again, up to `APPEND_TRIES` reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine.orchestrator import Orchestrator
from milepost.errors import ConcurrencyConflict
from milepost.store import port

APPEND_TRIES = 100
"""Reads of a busy run's log before an append behind it gives up."""

Build = Callable[[st.ExecutionState], Sequence[ev.Event]]
"""The run's state as read -> the events to append behind it (none: nothing to append)."""


@dataclass(frozen=True, slots=True)
class Appended:
    """What `append` did: the state it built on, and the events it appended."""

    read: st.ExecutionState
    """The run as read before the append (its status, its approvals: for the caller's
    answer when nothing was appended)."""
    events: list[ev.Event]
    """Appended, in order; empty when `build` had nothing to append."""


def append(
    store: port.Store,
    orchestrator: Orchestrator,
    execution_id: int,
    build: Build,
    *,
    again: str = "try again",
) -> Appended:
    """Append what `build` makes of the run's state behind its log as read; ConcurrencyConflict
    (`again`: what its message tells the caller to do) when the log kept moving. The state
    is read without the workload: a run sealed with a key this process lacks can still be
    acted on. The orchestrator's cached state is dropped after an append (the next read
    folds the log with it)."""
    for _ in range(APPEND_TRIES):
        state = orchestrator.state(execution_id, workload=False)
        events = list(build(state))
        if not events:
            return Appended(state, events)
        try:
            store.append(events, expect={execution_id: state.last_seq})
        except (port.LogMoved, port.ClaimMoved):  # the log, or a command settled, moved
            orchestrator.forget(execution_id)
            continue
        orchestrator.forget(execution_id)
        return Appended(state, events)
    raise ConcurrencyConflict(
        f"the log of execution {execution_id} kept moving; {again}",
        execution_ids=[str(execution_id)],
    )
