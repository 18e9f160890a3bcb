"""The `approval` table of a SQL store: its projection statements and its reads
(`store.approvals` computes the changes; `SQLStore` inherits this)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from milepost.store import approvals as ap
from milepost.store.tables import Tables

WAITING = (
    "EXISTS (SELECT 1 FROM approval a WHERE a.execution_id = x.execution_id"
    " AND a.status = 'pending' AND (a.expires_at IS NULL OR a.expires_at > ?))"
)
"""A run `x` waits for people: idle on purpose (not re-driven) until its approval expires."""

COLS = (
    "approval_id, execution_id, step, run, status, risk, approvers, quorum, expires_at,"
    " requested_at, decided_at, started_by, digest, request, votes, outcome, path"
)
_INSERT = (
    f"INSERT INTO approval ({COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,"
    " COALESCE((SELECT path FROM execution WHERE execution_id=?), ''))"
    " ON CONFLICT (approval_id) DO NOTHING"
)


class ApprovalTable(Tables):
    approver_entry = "EXISTS (SELECT 1 FROM json_each(approvers) WHERE value = ?)"
    """The dialect's test that the JSON list `approvers` holds an entry."""

    def project_approvals(self, conn: Any, ops: Sequence[ap.Op]) -> None:
        """Apply the approval changes of a batch, in order, in the append's transaction
        (which holds the executions' logs: nobody else changes these rows meanwhile)."""
        for op in ops:
            if isinstance(op, ap.Requested):
                r = op.row
                conn.execute(
                    self.sql(_INSERT),
                    (
                        r.approval_id,
                        r.execution_id,
                        r.step,
                        r.run,
                        r.status,
                        r.risk,
                        json.dumps(r.approvers),
                        r.quorum,
                        r.expires_at,
                        r.requested_at,
                        None,
                        r.started_by,
                        r.digest,
                        json.dumps(r.request, default=str),
                        "[]",
                        None,
                        r.execution_id,
                    ),
                )
            elif isinstance(op, ap.Voted):
                row = conn.execute(
                    self.sql(f"SELECT {COLS} FROM approval WHERE approval_id=?"), (op.approval_id,)
                ).fetchone()
                voted = None if row is None else ap.with_vote(decode(row), op.vote)
                if voted is not None:
                    conn.execute(
                        self.sql("UPDATE approval SET votes=? WHERE approval_id=?"),
                        (json.dumps(voted.votes), op.approval_id),
                    )
            elif isinstance(op, ap.Closed):
                conn.execute(
                    self.sql(
                        "UPDATE approval SET status=?, decided_at=?, outcome=?"
                        " WHERE approval_id=? AND status IN (?, ?)"
                    ),
                    (
                        op.status,
                        op.at,
                        json.dumps(op.outcome, default=str),
                        op.approval_id,
                        *ap.closes_from(op.status),
                    ),
                )
            else:
                text = (
                    "UPDATE approval SET status=?, decided_at=? WHERE execution_id=? AND status=?"
                )
                params: list[Any] = [ap.CANCELLED, op.at, op.execution_id, ap.PENDING]
                if op.step is not None:
                    text += " AND step=? AND run=?"
                    params += [op.step, op.run]
                conn.execute(self.sql(text), params)

    def get_approval(self, approval_id: int) -> ap.ApprovalRow | None:
        rows = self.rows(f"SELECT {COLS} FROM approval WHERE approval_id=?", (approval_id,))
        return decode(rows[0]) if rows else None

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
    ) -> list[ap.ApprovalRow]:
        where: list[str] = []
        params: list[Any] = []
        if decided is not None:  # the history (any outcome) or what still waits
            where.append("status<>?" if decided else "status=?")
            params.append(ap.PENDING)
        for clause, value in (
            ("status=?", status),
            ("execution_id=?", execution_id),
            (self.approver_entry, approver),
            ("risk=?", risk),
            ("approval_id>?", after),
        ):
            if value is not None:
                where.append(clause)
                params.append(value)
        text = f"SELECT {COLS} FROM approval"
        if where:
            text += " WHERE " + " AND ".join(where)
        rows = self.rows(text + " ORDER BY approval_id LIMIT ?", (*params, max(limit, 0)))
        return [decode(r) for r in rows]

    def pending_approvals_by_risk(self) -> dict[str, int]:
        rows = self.rows(
            "SELECT risk, count(*) FROM approval WHERE status=? GROUP BY risk", (ap.PENDING,)
        )
        return {str(risk): int(n) for risk, n in rows}


def decode(row: Sequence[Any]) -> ap.ApprovalRow:
    (
        aid,
        xid,
        step,
        run,
        status,
        risk,
        approvers,
        quorum,
        expires,
        requested,
        decided,
        started_by,
        digest,
        request,
        votes,
        outcome,
        path,
    ) = row
    return ap.ApprovalRow(
        approval_id=int(aid),
        execution_id=int(xid),
        step=step,
        run=int(run),
        status=status,
        risk=risk,
        approvers=json.loads(approvers),
        quorum=int(quorum),
        expires_at=None if expires is None else float(expires),
        requested_at=float(requested),
        decided_at=None if decided is None else float(decided),
        started_by=started_by,
        digest=digest,
        request=json.loads(request),
        votes=json.loads(votes),
        outcome=None if outcome is None else json.loads(outcome),
        path=path,
    )
