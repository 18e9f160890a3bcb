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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from milepost.core import events as ev
from milepost.engine import fence
from milepost.engine.orchestrator import Outcome
from milepost.store import port

if TYPE_CHECKING:
    from milepost.engine.lifecycle import Lifecycle


@dataclass(slots=True)
class Reported:
    events: list[ev.Event]
    """The events as the engine took them (stale marks included), in the batch's order."""
    stored_ids: set[int] = field(default_factory=set)
    stale_ids: set[int] = field(default_factory=set)
    duplicate_ids: set[int] = field(default_factory=set)
    """Repeats of events the log already held (same execution, type, step and content)."""
    ignored: dict[int, str] = field(default_factory=dict)
    """Events of runs that had ended, not stored -> why."""
    claimed: port.Claimed = field(default_factory=list)
    written: set[int] = field(default_factory=set)
    """Executions this call appended to: the engine's states of them are the log's head."""


def report(engine: Lifecycle, events: list[ev.Event],
           claim: port.ClaimRequest | None) -> Reported:  # fmt: skip
    # the epochs read here must not move before the append
    with engine.locked({e.execution_id for e in events}):
        fence.check_executions(engine.read, events)
        fence.check_named_commands(engine.store, events)
        outcome: Outcome | None = None
        fenced = events
        if engine.handed.vouches(events):
            # reports of claims handed out here: the append checks them in its transaction
            with contextlib.suppress(port.ClaimMoved):
                outcome = engine.process(events, refresh=engine.refresh, claim=claim,
                                         check_claims=True)  # fmt: skip
        if outcome is None:
            fenced = fence.fence(engine.store, events)
            outcome = engine.process(fenced, refresh=engine.refresh, claim=claim)
        engine.handed.forget(events)
    # what went in: the fence (epochs) and the orchestrator's (settled commands)
    stored = {e.event_id: e for e in outcome.events}
    result = Reported(events=[stored.get(e.event_id, e) for e in fenced])
    result.stored_ids = set(stored) & {e.event_id for e in fenced}
    result.stale_ids = {e.event_id for e in result.events
                        if e.meta.get("stale") and e.event_id in stored}  # fmt: skip
    result.claimed = outcome.claimed
    result.written = {e.execution_id for e in outcome.events}
    ended = {state.execution_id: state.status for state in outcome.finished}
    result.ignored = {e.event_id: f"execution {e.execution_id} is "
                      f"{ended.get(e.execution_id, 'ended')}: nothing is stored after its end"
                      for e in outcome.ignored}  # fmt: skip
    # the store refuses another event with a known id (409), so one neither stored nor
    # left out after the run's end is a repeat
    result.duplicate_ids = {e.event_id for e in fenced} - result.stored_ids - set(result.ignored)
    # settling skips a run that has ended, so a cancel left out after the end settles nothing
    cancels = {e.execution_id for e in fenced if e.event_type == ev.EXECUTION_CANCEL_REQUESTED}
    if cancels:
        engine.settle_cancelled(cancels)
    return result
