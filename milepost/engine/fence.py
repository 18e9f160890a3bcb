"""Which events the engine takes: checks before a batch is processed, and the fence.

The whole batch is checked before anything is written (all or nothing): every execution
exists, every step is one of its playbook, an ended run takes no new event but reports,
every command named exists and belongs to the event's execution. Then the fence marks the
reports that are not from the command's live claim as stale (`meta.stale`): kept in the
log, skipped by the fold. Reports for commands the run no longer waits for are marked by
the orchestrator, on the state it decides on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine.errors import EventsInvalid, ExecutionTerminal, Problem, command_not_found
from milepost.ids import as_id
from milepost.playbook import model
from milepost.store import port

REPORT_TYPES = ev.REPORTS
"""Reports for a command: they carry `context.command_id` and an epoch, and are fenced."""

Read = Callable[..., Any]
"""`Lifecycle.read`: `read(execution_id, view, refresh=...)`."""


def check_executions(read: Read, events: list[ev.Event]) -> None:
    """Every execution exists (ExecutionNotFound), every `step` is one of its playbook
    (EventsInvalid), and none has ended unless the events are reports (stored as nothing,
    later) or already in its log (ExecutionTerminal). The state is looked up again only
    for non-reports: a report for an ended run is the orchestrator's to leave out, on the
    state it decides on."""
    positions: dict[int, list[int]] = {}
    for i, event in enumerate(events):
        positions.setdefault(event.execution_id, []).append(i)
    problems: list[Problem] = []
    ended: list[tuple[int, str]] = []
    for xid, at in sorted(positions.items()):
        steps = {step for i in at if (step := events[i].step) is not None}
        others = [events[i].event_id for i in at if events[i].event_type not in REPORT_TYPES]
        status, unknown, new = read(
            xid, functools.partial(_look, steps, others), refresh=bool(others)
        )
        problems += [
            {"loc": [i, "step"], "msg": f"execution {xid} has no step {events[i].step!r}"}
            for i in at
            if events[i].step in unknown
        ]
        if status in st.TERMINAL and new:
            ended.append((xid, status))
    if problems:
        raise EventsInvalid(problems)
    if ended:
        xid, status = ended[0]
        raise ExecutionTerminal(
            f"execution {xid} is {status}: it takes no more events",
            execution_id=str(xid),
            status=status,
        )


def _look(
    steps: set[str], ids: list[int], state: st.ExecutionState, playbook: model.Playbook
) -> tuple[str, set[str], bool]:
    """The status, which of `steps` the playbook lacks, and whether any of `ids` is new."""
    # no set of the playbook's steps: a chain of a thousand steps would build it per batch
    unknown = {step for step in steps if step not in playbook.steps}
    return state.status, unknown, any(i not in state.seen for i in ids)


def check_named_commands(store: port.Store, events: list[ev.Event]) -> None:
    """An event that is not a report but names a command (`context.command_id`) names one
    of its own execution (reports are checked by the fence)."""
    # an informative event (a type the engine does not know) keeps its context as it came:
    # a NoETL worker's `command_id` is not one of this engine's commands
    named = {
        i: int(cid)
        for i, e in enumerate(events)
        if e.event_type not in REPORT_TYPES
        and not ev.informative(e)
        and (cid := as_id(e.payload.get("command_id"))) is not None
    }
    if not named:
        return
    rows = store.get_commands(sorted(set(named.values())))
    for i, cid in named.items():
        row = rows.get(cid)
        if row is None:
            raise command_not_found(cid)
        if row.execution_id != events[i].execution_id:
            raise _foreign(row, events[i], [i, "context", "command_id"])


def fence(store: port.Store, events: list[ev.Event]) -> list[ev.Event]:
    """Mark reports that are not from the command's live claim as stale: the lease epoch
    is not the command's current epoch (it expired and the command was re-issued, or was
    released), or the command is queued (no attempt holds it)."""
    rows = store.get_commands(
        [int(e.payload["command_id"]) for e in events if e.event_type in REPORT_TYPES]
    )
    out: list[ev.Event] = []
    for event in events:
        if event.event_type not in REPORT_TYPES:
            out.append(event)
            continue
        cid = int(event.payload["command_id"])
        row = rows.get(cid)
        if row is None:
            raise command_not_found(cid)
        if row.execution_id != event.execution_id:
            # no index, as the API always answered it: the field, not the event
            raise _foreign(row, event, ["context", "command_id"])
        why = stale_reason(row, int(event.meta["epoch"]))
        if why is None:
            out.append(event)
        else:
            out.append(replace(event, meta={**event.meta, "stale": True, "stale_reason": why}))
    return out


def _foreign(row: port.CommandRow, event: ev.Event, loc: list[Any]) -> EventsInvalid:
    """The event names a command of another execution."""
    return EventsInvalid(
        [
            {
                "loc": loc,
                "msg": f"command {row.command_id} belongs to execution "
                f"{row.execution_id}, not {event.execution_id}",
            }
        ]
    )


def stale_reason(row: port.CommandRow, epoch: int) -> str | None:
    if row.epoch != epoch:
        return f"epoch {epoch} is not the live epoch {row.epoch}"
    if row.status == port.COMMAND_QUEUED:
        return "the command is queued: no attempt holds it"
    return None
