"""The `approval` projection as a pure function of events, and its part of the store port.

One row per approval request (`approval.requested`), kept by the events that follow it:
each `approval.decided` adds a vote while the approval is pending and its identity has not
voted; `approval.granted`, `denied`, `expired` and `invalidated` close it with their
payload as `outcome`; a `step.exit` CANCELLED of the gated step's run, or the end of the
execution, cancels it while it is still pending (no event of its own). A closed approval
stays as it closed: the engine decides nothing on it any more, and a late vote in the log
(the engine refuses those, but a log is what it is) is not counted.

`ops` turns an event into ordered changes (`Op`); the SQL stores apply them with one
statement each (`store.approval_table`), the in-memory store and `projection.rebuild`
with `apply`. Approval events are rare (a person decides each): no batching here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from milepost.core import events as ev
from milepost.core.approval_state import CANCELLED as CANCELLED
from milepost.core.approval_state import DENIED as DENIED
from milepost.core.approval_state import EXPIRED as EXPIRED
from milepost.core.approval_state import GRANTED as GRANTED
from milepost.core.approval_state import INVALIDATED as INVALIDATED
from milepost.core.approval_state import PENDING as PENDING

# the statuses above are re-exported: the store's modules name them from here
STATUSES = (PENDING, GRANTED, DENIED, EXPIRED, INVALIDATED, CANCELLED)

CLOSING = {
    ev.APPROVAL_GRANTED: GRANTED,
    ev.APPROVAL_DENIED: DENIED,
    ev.APPROVAL_EXPIRED: EXPIRED,
    ev.APPROVAL_INVALIDATED: INVALIDATED,
}
"""The events that close an approval, and the status each gives it."""


@dataclass(frozen=True, slots=True)
class ApprovalRow:
    """One approval request as the `approval` table holds it (JSON columns decoded)."""

    approval_id: int
    """The id of its `approval.requested` event."""
    execution_id: int
    step: str
    run: int
    status: str
    """One of STATUSES."""
    risk: str
    approvers: list[str]
    """`role:<name>` and `user:<name>` entries, as the playbook gave them."""
    quorum: int
    expires_at: float | None
    requested_at: float
    decided_at: float | None
    """When it closed (granted, denied, expired, invalidated or cancelled)."""
    started_by: str | None
    """The identity that started the run (it may not approve unless allowed)."""
    digest: str
    request: dict[str, Any]
    """The `approval.requested` payload (the calls as approvers see them)."""
    votes: list[dict[str, Any]] = field(default_factory=list)
    """`{identity, decision, reason, at}` in the order they were cast."""
    outcome: dict[str, Any] | None = None
    """The payload of the event that closed it (granted/denied/expired/invalidated)."""
    path: str = ""
    """The playbook path of the execution, for display."""


class Approvals(Protocol):
    """The store's approval reads (`port.Store` has them)."""

    def get_approval(self, approval_id: int) -> ApprovalRow | None: ...

    def list_approvals(
        self,
        *,
        status: str | None = None,
        execution_id: int | None = None,
        approver: str | None = None,
        risk: str | None = None,
        limit: int = 100,
        after: int | None = None,
        decided: bool | None = None,
    ) -> list[ApprovalRow]:
        """By approval id ascending, those after `after` (the last id of the previous page);
        `approver`: rows whose `approvers` hold that exact entry (`role:finance`); `decided`:
        True only those no longer pending (the history), False only pending ones."""
        ...

    def pending_approvals_by_risk(self) -> dict[str, int]:
        """How many approvals are pending, by risk (only risks with some)."""
        ...


# -- the changes -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Requested:
    row: ApprovalRow
    """`path` empty: the store fills it from the execution's row."""


@dataclass(frozen=True, slots=True)
class Voted:
    approval_id: int
    vote: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Closed:
    approval_id: int
    status: str
    at: float
    outcome: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The pending approvals of the execution (of one step run when `step` is set)."""

    execution_id: int
    at: float
    step: str | None = None
    run: int | None = None


Op = Requested | Voted | Closed | Cancelled


def ops(event: ev.Event) -> list[Op]:
    """The approval changes of one stored event (none for most)."""
    p, t, at = event.payload, event.event_type, float(event.created_at)
    if t == ev.APPROVAL_REQUESTED:
        return [Requested(requested_row(event))]
    if t == ev.APPROVAL_DECIDED:
        return [
            Voted(
                int(p["approval_id"]),
                {
                    "identity": str(p["identity"]),
                    "decision": str(p["decision"]),
                    "reason": p.get("reason"),
                    "at": at,
                },
            )
        ]
    if t in CLOSING:
        return [Closed(int(p["approval_id"]), CLOSING[t], at, _as_json(p))]
    if t == ev.STEP_EXIT and event.status == "CANCELLED" and event.step is not None:
        return [Cancelled(event.execution_id, at, event.step, int(p.get("run", 0)))]
    if t in ev.TERMINAL_EXECUTION_EVENTS:
        return [Cancelled(event.execution_id, at)]
    return []


def requested_row(event: ev.Event) -> ApprovalRow:
    p = event.payload
    expires = p.get("expires_at")
    started_by = p.get("started_by")
    return ApprovalRow(
        approval_id=event.event_id,
        execution_id=event.execution_id,
        step=str(event.step),
        run=int(p.get("run", 1)),
        status=PENDING,
        risk=str(p.get("risk") or "medium"),
        approvers=[str(a) for a in p.get("approvers", ())],
        quorum=int(p.get("quorum", 1)),
        expires_at=None if expires is None else float(expires),
        requested_at=float(event.created_at),
        decided_at=None,
        started_by=None if started_by is None else str(started_by),
        digest=str(p.get("digest", "")),
        request=_as_json(p),
    )


def _as_json(value: Mapping[str, Any]) -> dict[str, Any]:
    # what a database gives back (string keys, lists for tuples): every store alike
    out: dict[str, Any] = ev.jsonable(value)
    return out


def with_vote(row: ApprovalRow, vote: Mapping[str, Any]) -> ApprovalRow | None:
    """`row` with `vote` counted, or None when it does not count (closed, or that identity
    has voted)."""
    if row.status != PENDING or any(v["identity"] == vote["identity"] for v in row.votes):
        return None
    return dataclasses.replace(row, votes=[*row.votes, dict(vote)])


def closes_from(status: str) -> tuple[str, str]:
    """The statuses a closing event with `status` changes (two, for the SQL's `IN`): a
    pending approval, and a granted one that an attempt after the grant found no longer
    covering it (`approval.invalidated` with the refused `index` and `attempt`)."""
    return (PENDING, GRANTED if status == INVALIDATED else PENDING)


def cancels(op: Cancelled, row: ApprovalRow) -> bool:
    return (
        row.status == PENDING
        and row.execution_id == op.execution_id
        and (op.step is None or (row.step, row.run) == (op.step, op.run))
    )


def apply(
    changes: Iterable[Op], approvals: dict[int, ApprovalRow], paths: Mapping[int, str]
) -> None:
    """Apply `changes` in order to rows held in memory, as the SQL statements do (`paths`:
    execution id -> playbook path)."""
    for op in changes:
        if isinstance(op, Requested):
            if op.row.approval_id not in approvals:
                approvals[op.row.approval_id] = dataclasses.replace(
                    op.row, path=paths.get(op.row.execution_id, "")
                )
        elif isinstance(op, Voted):
            held = approvals.get(op.approval_id)
            voted = None if held is None else with_vote(held, op.vote)
            if voted is not None:
                approvals[op.approval_id] = voted
        elif isinstance(op, Closed):
            held = approvals.get(op.approval_id)
            if held is not None and held.status in closes_from(op.status):
                approvals[op.approval_id] = dataclasses.replace(
                    held, status=op.status, decided_at=op.at, outcome=op.outcome
                )
        else:
            for aid, row in list(approvals.items()):
                if cancels(op, row):
                    approvals[aid] = dataclasses.replace(row, status=CANCELLED, decided_at=op.at)


def select(
    rows: Iterable[ApprovalRow],
    *,
    status: str | None = None,
    execution_id: int | None = None,
    approver: str | None = None,
    risk: str | None = None,
    limit: int = 100,
    after: int | None = None,
    decided: bool | None = None,
) -> list[ApprovalRow]:
    """`list_approvals` over rows held in memory."""
    kept = sorted(
        (
            r
            for r in rows
            if (status is None or r.status == status)
            and (execution_id is None or r.execution_id == execution_id)
            and (approver is None or approver in r.approvers)
            and (risk is None or r.risk == risk)
            and (after is None or r.approval_id > after)
            and (decided is None or (r.status != PENDING) == decided)
        ),
        key=lambda r: r.approval_id,
    )
    return kept[: max(limit, 0)]


def by_risk(rows: Iterable[ApprovalRow]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rows:
        if row.status == PENDING:
            out[row.risk] = out.get(row.risk, 0) + 1
    return out


def merged(pages: Sequence[Sequence[ApprovalRow]], limit: int) -> list[ApprovalRow]:
    """Pages of several stores (shards) as one: by id, the first `limit`."""
    return sorted((r for page in pages for r in page), key=lambda r: r.approval_id)[:limit]
