"""The approvals of a run as the fold sees them (DSL 10.3): requests, votes and outcomes.

`core.state` folds the approval events through the handlers here; `core.approvals`
decides what they lead to. A vote is folded only while its approval is pending and only
from an identity that may decide it and has not voted yet: the engine checks the same
before it appends one, and the fold checks again, so a vote that slipped into the log by
another way changes nothing (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from milepost.core import events as ev

if TYPE_CHECKING:
    from milepost.core.state import ExecutionState

PENDING = "pending"
GRANTED = "granted"
DENIED = "denied"
EXPIRED = "expired"
INVALIDATED = "invalidated"
CANCELLED = "cancelled"
"""The step stopped waiting for another reason (a cancel, the run failing elsewhere)."""
CLOSED = frozenset({GRANTED, DENIED, EXPIRED, INVALIDATED, CANCELLED})

AWAITING_APPROVAL = "AWAITING_APPROVAL"
"""A step's status while its approval is pending."""

APPROVE = "approve"
DENY = "deny"
DECISIONS = (APPROVE, DENY)


@dataclass(frozen=True, slots=True)
class Voter:
    """Who decides: an identity (`user:<name>`) and the roles it holds."""

    identity: str
    roles: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Vote:
    identity: str
    decision: str
    reason: str | None
    at: float


@dataclass(slots=True)
class Approval:
    """One approval request of one step run."""

    approval_id: int
    step: str
    run: int
    requested_at: float
    approvers: tuple[str, ...]
    quorum: int
    expires_at: float | None
    expires_in: float | None
    risk: str
    allow_self_approval: bool
    started_by: str | None
    digest: str
    calls: list[dict[str, Any]]
    """`[{index, input, digest}]`: each command the step will issue, as approvers saw it."""
    policy: str | None = None
    status: str = PENDING
    votes: list[Vote] = field(default_factory=list)

    @property
    def approvals(self) -> list[Vote]:
        return [v for v in self.votes if v.decision == APPROVE]

    @property
    def denial(self) -> Vote | None:
        return next((v for v in self.votes if v.decision == DENY), None)

    def call(self, index: int) -> dict[str, Any] | None:
        """The approved call of loop index `index` (-1: the step's one call), or None."""
        # the calls are in index order: a loop's i-th is at i, found at once (its every
        # iteration asks, so a scan would make a long loop quadratic)
        at = max(index, 0)
        if at < len(self.calls) and int(self.calls[at].get("index", -1)) == index:
            return self.calls[at]
        return next((c for c in self.calls if int(c.get("index", -1)) == index), None)

    def digest_of(self, index: int) -> str | None:
        call = self.call(index)
        return None if call is None else str(call.get("digest"))


def may_decide(approval: Approval, voter: Voter) -> bool:
    """Whether `voter` matches an `approvers` entry: `user:<id>` by identity, `role:<name>`
    by a role it holds."""
    for entry in approval.approvers:
        kind, _, name = entry.partition(":")
        if kind == "user" and voter.identity == f"user:{name}":
            return True
        if kind == "role" and name in voter.roles:
            return True
    return False


def is_self_approval(approval: Approval, voter: Voter) -> bool:
    return (
        not approval.allow_self_approval
        and approval.started_by is not None
        and voter.identity == approval.started_by
    )


def has_voted(approval: Approval, identity: str) -> bool:
    return any(v.identity == identity for v in approval.votes)


# -- the fold ------------------------------------------------------------------------------


def apply_requested(state: ExecutionState, event: ev.Event) -> None:
    """Only a gated step run still without a request takes one: a request that reached an
    old log some other way (clients could post approval events once) changes nothing."""
    p = event.payload
    step = event.step or ""
    sr = state.running.get(step)
    approval_id, run = _int(p.get("approval_id")), _int(p.get("run"))
    if sr is None or not sr.gated or sr.approval_id is not None or sr.run != run or approval_id < 0:
        return
    approval = Approval(
        approval_id=approval_id,
        step=step,
        run=run,
        requested_at=event.created_at,
        approvers=tuple(p.get("approvers") or ()),
        quorum=int(p.get("quorum", 1)),
        expires_at=_float(p.get("expires_at")),
        expires_in=_float(p.get("expires_in")),
        risk=str(p.get("risk") or "medium"),
        allow_self_approval=bool(p.get("allow_self_approval")),
        started_by=p.get("started_by"),
        digest=str(p.get("digest") or ""),
        calls=list(p.get("calls") or []),
        policy=p.get("policy"),
    )
    state.approvals[approval_id] = approval
    sr.approval_id = approval_id
    state.step_status[step] = AWAITING_APPROVAL


def apply_decided(state: ExecutionState, event: ev.Event) -> None:
    p = event.payload
    approval = state.approvals.get(_int(p.get("approval_id")))
    if approval is None or approval.status != PENDING:
        return
    voter = Voter(str(p.get("identity") or ""), frozenset(p.get("roles") or ()))
    decision = p.get("decision")
    if (
        decision not in DECISIONS
        or not may_decide(approval, voter)
        or is_self_approval(approval, voter)
        or has_voted(approval, voter.identity)
    ):
        return
    approval.votes.append(Vote(voter.identity, str(decision), p.get("reason"), event.created_at))


def apply_outcome(status: str) -> Any:
    def apply(state: ExecutionState, event: ev.Event) -> None:
        approval = state.approvals.get(_int(event.payload.get("approval_id")))
        if approval is None or approval.status != PENDING:
            return
        approval.status = status
        if status == GRANTED and (event.step or "") in state.running:
            state.step_status[event.step or ""] = "RUNNING"

    return apply


_close_invalidated = apply_outcome(INVALIDATED)


def apply_invalidated(state: ExecutionState, event: ev.Event) -> None:
    """Before the grant it closes a pending approval (decide fails the step in the same
    decision). After it, an attempt of the step run was refused (`core.approvals.recheck`
    before issuing it, or the attempt itself before its tool ran): the approval reads
    invalidated, and that index fails as a failed attempt does, so the step run fails once
    its attempts in flight have finished and nothing more is issued or retried."""
    from milepost.core import state as st  # the module that folds with this one

    approval = state.approvals.get(_int(event.payload.get("approval_id")))
    if approval is None or approval.status != GRANTED:
        _close_invalidated(state, event)
        return
    approval.status = INVALIDATED
    p = event.payload
    sr = state.running.get(approval.step)
    if sr is None or sr.run != approval.run or "index" not in p:
        return
    index, attempt = _int(p["index"]), _int(p.get("attempt", 1))
    sr.retry_at.pop(index, None)
    sr.retry_errors.pop(index, None)
    if index not in sr.failures:  # the attempt's own refusal is there already
        error = refused_attempt(
            attempt, str(p.get("cause")), str(p.get("reason")), p.get("changed")
        )
        sr.failures[index] = st.Failure(attempt=attempt, error=error)


def refused_attempt(
    attempt: int, cause: str, reason: str, changed: str | None = None
) -> dict[str, Any]:
    """The error of an attempt its step run's approval no longer covers (`cause`: `expired`,
    `policy` or `changed`): kind `approval`, never retried. `invalidated` holds what the
    `approval.invalidated` event records."""
    return {
        "kind": "approval",
        "message": f"approval invalidated before attempt {attempt}: {reason}",
        "retryable": False,
        "invalidated": {"cause": cause, "reason": reason, "changed": changed},
    }


def close_pending(state: ExecutionState, step: str | None = None, run: int | None = None) -> None:
    """The step run (or, with no step, the whole run) stopped waiting: its pending
    approvals can no longer be decided."""
    for approval in state.approvals.values():
        if approval.status == PENDING and (
            step is None or (approval.step, approval.run) == (step, run)
        ):
            approval.status = CANCELLED


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1
