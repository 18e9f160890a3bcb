"""Votes on approval gates, for every transport (DSL 10.3).

The engine service checks a vote against the run's folded state (`core.approvals.
check_vote`) under the run's lock and processes its `approval.decided` like a report: the
decision it leads to (grant and first command, denial, invalidation) is appended in the
same transaction. A process that does not drive the run (`milepost approve` on a local
database while `milepost run` drives it in another terminal) appends the vote alone,
behind the log it read (`append_decision`, through `engine.behind`), and the driver
decides on its next look.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from milepost.core import approval_state as ap
from milepost.core import approvals
from milepost.core import events as ev
from milepost.core import state as st
from milepost.core.approval_state import Voter
from milepost.core.approvals import ApprovalClosed, ApprovalNotFound
from milepost.engine import behind
from milepost.engine.orchestrator import Orchestrator
from milepost.store import port

if TYPE_CHECKING:
    from milepost.engine.lifecycle import Lifecycle


def execution_of(store: port.Store, approval_id: int) -> int:
    return approval(store, approval_id).execution_id


def decide_approval(
    service: Lifecycle, approval_id: int, voter: Voter, decision: str, reason: str | None
) -> port.ApprovalRow:
    """Check and record one vote, and whatever it decides; the approval as it is after."""
    xid = execution_of(service.store, approval_id)
    with service.locks.hold([xid]):
        state = service.fresh(xid)
        now = service.clock()
        try:
            event = approvals.vote_event(
                state, approval_id, voter, decision, reason, now, service.new_id()
            )
        except ApprovalClosed:
            pending = state.approvals.get(approval_id)
            if pending is not None and pending.status == ap.PENDING and not state.terminal:
                service.process(also=[xid])  # expired before the tick saw it: record it now
            raise
        service.process([event])
    return approval(service.store, approval_id)


def append_decision(
    store: port.Store,
    orchestrator: Orchestrator,
    approval_id: int,
    voter: Voter,
    decision: str,
    reason: str | None,
    *,
    on_appended: Callable[[ev.Event], None] | None = None,
) -> ap.Approval:
    """Append one checked vote behind the log as it was read, for the process that drives
    the run to act on; returns the approval as the vote leaves it. `on_appended` gets the
    vote once committed (the approval webhook: no engine call of this process sees it)."""
    xid = execution_of(store, approval_id)

    def vote(state: st.ExecutionState) -> list[ev.Event]:
        return [
            approvals.vote_event(
                state,
                approval_id,
                voter,
                decision,
                reason,
                orchestrator.clock(),
                orchestrator.new_id(),
            )
        ]

    (event,) = behind.append(store, orchestrator, xid, vote, again="decide again").events
    if on_appended is not None:
        on_appended(event)
    return orchestrator.state(xid, workload=False).approvals[approval_id]


def approval(store: port.Store, approval_id: int) -> port.ApprovalRow:
    row = store.get_approval(approval_id)
    if row is None:
        raise ApprovalNotFound(f"no approval {approval_id}", approval_id=str(approval_id))
    return row
