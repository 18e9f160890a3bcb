"""A batch of events reported to the engine: checked, fenced, then folded with the
decisions in ONE `process` call (the reports and every event decided from them are
appended in one transaction).

Reports of claims this engine handed out (`Lifecycle.handed`) skip the read of their
command rows: the append checks the claims in its transaction and, if one moved, writes
nothing, and the batch takes the careful way (read the rows, mark stale, process again).

After the end of a run its log ends with its terminal event: reports for an ended
execution are taken but not stored (`Reported.ignored`: a late worker must not retry),
any other event for it is refused (`ExecutionTerminal`).
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING

from milepost.core import events as ev
from milepost.engine import attempt_logs, faults, fence
from milepost.engine.errors import AlreadyTerminal
from milepost.engine.orchestrator import Outcome
from milepost.store import port

if TYPE_CHECKING:
    from milepost.engine.lifecycle import Lifecycle


class Reported:
    """What one reported batch came to, worked out when asked (the embedded transport
    asks nothing: it acts on the outcome itself)."""

    def __init__(self, fenced: list[ev.Event], outcome: Outcome) -> None:
        self._fenced = fenced
        self.outcome = outcome
        self.claimed: port.Claimed = outcome.claimed

    @functools.cached_property
    def _stored(self) -> dict[int, ev.Event]:
        return {e.event_id: e for e in self.outcome.events}

    @functools.cached_property
    def events(self) -> list[ev.Event]:
        """The events as the engine took them (stale marks included), in the batch's order:
        the fence's epochs and the orchestrator's settled commands."""
        return [self._stored.get(e.event_id, e) for e in self._fenced]

    @functools.cached_property
    def stored_ids(self) -> set[int]:
        return set(self._stored) & {e.event_id for e in self._fenced}

    @functools.cached_property
    def stale_ids(self) -> set[int]:
        return {
            e.event_id for e in self.events if e.meta.get("stale") and e.event_id in self._stored
        }

    @functools.cached_property
    def ignored(self) -> dict[int, str]:
        """Events of runs that had ended, not stored -> why."""
        ended = {state.execution_id: state.status for state in self.outcome.finished}
        return {
            e.event_id: f"execution {e.execution_id} is "
            f"{ended.get(e.execution_id, 'ended')}: nothing is stored after its end"
            for e in self.outcome.ignored
        }

    @functools.cached_property
    def duplicate_ids(self) -> set[int]:
        """Repeats of events the log already held (same execution, type, step and content):
        the store refuses another event with a known id (409), so one neither stored nor
        left out after the run's end is a repeat."""
        return {e.event_id for e in self._fenced} - self.stored_ids - set(self.ignored)

    @functools.cached_property
    def written(self) -> set[int]:
        """Executions this call appended to: the engine's states of them are the log's head."""
        return {e.execution_id for e in self.outcome.events}


def report(
    engine: Lifecycle,
    events: list[ev.Event],
    claim: port.ClaimRequest | None,
    printed: attempt_logs.Printed | None = None,
    made_here: bool = False,
) -> Reported:
    # the epochs read here must not move before the append
    with engine.locked({e.execution_id for e in events}):
        if not made_here:  # a client's batch: every execution, step and command it names
            fence.check_executions(engine.read, events)
            fence.check_named_commands(engine.store, events)
        if printed:  # before the append: a run seen ended has its reports' logs stored
            attempt_logs.keep(engine.store, events, printed)
        outcome: Outcome | None = None
        fenced = events
        if faults.skip_fence():  # the fault `milepost verify` must find: no fence at all
            outcome = engine.process(events, refresh=engine.refresh, claim=claim)
        elif engine.handed.vouches(events):
            # reports of claims handed out here: the append checks them in its transaction
            with contextlib.suppress(port.ClaimMoved):  # nothing written: the careful way
                outcome = engine.process(
                    events, refresh=engine.refresh, claim=claim, check_claims=True
                )
        if outcome is None:
            fenced = fence.fence(engine.store, events)
            outcome = engine.process(fenced, refresh=engine.refresh, claim=claim)
        engine.handed.forget(events)
    # settling skips a run that has ended, so a cancel left out after the end settles nothing
    cancels = {e.execution_id for e in fenced if e.event_type == ev.EXECUTION_CANCEL_REQUESTED}
    for xid in sorted(cancels):  # as the cancel route: queued work settled, children too
        with contextlib.suppress(AlreadyTerminal):
            engine.cancel(xid)
    return Reported(fenced, outcome)
