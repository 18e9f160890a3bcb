"""Liveness in a SQL store (migration 8): a command's own lease, a run's stall window.

`SQLStore` inherits this. The claim statements of the dialects extend a claim by
`COALESCE(lease_s, <asked>)`; here are the heartbeat, which does the same, the projection
of the two columns, and the query the reconciler finds stalled runs with.
"""

from __future__ import annotations

from typing import Any

from milepost.errors import ClaimRefused
from milepost.store import port, projection
from milepost.store.tables import CMD_COLS, OPEN, Tables

_HEARTBEAT = (
    "UPDATE command SET lease_expires_at = ? + COALESCE(lease_s, ?), updated_at=?"
    " WHERE command_id=? AND status=? AND worker_id=? AND epoch=? RETURNING lease_expires_at"
)
LAST_AT = (
    "COALESCE((SELECT e.created_at FROM event e WHERE e.execution_id = x.execution_id"
    " ORDER BY e.seq DESC LIMIT 1), x.updated_at)"
)
"""When run `x` last spoke: its last event's time, else its row's (the re-drive reads it too)."""
_STALLED = (
    "SELECT execution_id, last_at FROM (SELECT x.execution_id, x.stall_after,"
    f" {LAST_AT} AS last_at FROM execution x"
    " WHERE x.status='RUNNING' AND x.stall_after IS NOT NULL) s"
    " WHERE last_at < ? - stall_after ORDER BY execution_id"
)


_LAST_EVENT = "SELECT created_at FROM event WHERE execution_id=? ORDER BY seq DESC LIMIT 1"


def lease_of(row: port.CommandRow, req: port.ClaimRequest) -> port.Lease:
    """The lease of a row a claim statement took (its `lease_expires_at` as the statement
    set it: the command's own lease or the one asked for)."""
    expires = float(
        row.lease_expires_at if row.lease_expires_at is not None else req.now + req.lease_s
    )
    return port.Lease(row.command_id, req.worker_id, row.epoch, expires, lease_s=expires - req.now)


class LivenessTable(Tables):
    def project_liveness(self, conn: Any, change: projection.Changes) -> None:
        """Set the lease and stall columns of rows this append's `issued` and `started`
        inserted (only for playbooks that set them)."""
        if change.leases:
            self.many(conn, "UPDATE command SET lease_s=? WHERE command_id=?", change.leases)
        if change.stalls:
            self.many(
                conn, "UPDATE execution SET stall_after=? WHERE execution_id=?", change.stalls
            )

    def heartbeat(
        self, command_id: int, worker_id: str, epoch: int, now: float, lease_s: float
    ) -> port.Lease:
        with self.txn() as conn:
            row = conn.execute(
                self.sql(_HEARTBEAT),
                (now, lease_s, now, command_id, port.COMMAND_CLAIMED, worker_id, epoch),
            ).fetchone()
            if row is None:
                raise ClaimRefused(
                    "no live claim with that epoch",
                    reason="stale_epoch",
                    command_id=str(command_id),
                )
        expires = float(row[0])
        return port.Lease(command_id, worker_id, epoch, expires, lease_s=expires - now)

    def stalled_executions(self, now: float) -> list[tuple[int, float]]:
        return [(int(r[0]), float(r[1])) for r in self.rows(_STALLED, (now,))]

    def last_event_at(self, execution_id: int) -> float | None:
        rows = self.rows(_LAST_EVENT, (execution_id,))
        return float(rows[0][0]) if rows else None

    def overdue_claims(self, now: float, after_s: float) -> list[port.CommandRow]:
        # `OPEN` as the partial index `command_open` (migration 6) is written: SQLite uses
        # an index only for a query that repeats its condition (else: every command read)
        rows = self.rows(
            f"SELECT {CMD_COLS} FROM command WHERE {OPEN} AND"
            f" status='{port.COMMAND_CLAIMED}' AND claimed_at<? ORDER BY command_id",
            (now - after_s,),
        )
        return [port.CommandRow(*r) for r in rows]
