"""The approvals of a run as the fold sees them (DSL 10.3): requests, votes and outcomes.

The records here are the ones `core.state.ExecutionState` holds (`approvals`): this module
does not read the state back, so the state's module can import it. `core.fold` folds the
approval events into them; `core.approvals` decides what they lead to. A vote is folded only while its approval is pending and only
from an identity that may decide it and has not voted yet: the engine checks the same
before it appends one, and the fold checks again, so a vote that slipped into the log by
another way changes nothing (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
