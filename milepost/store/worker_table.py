"""The `worker` table of a SQL store (the workers registry, `store.workers`); `SQLStore`
inherits this."""

from __future__ import annotations

from milepost.store import workers
from milepost.store.tables import Tables

_RECORD = (
    f"INSERT INTO worker ({workers.WORKER_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,NULL,?)"
    " ON CONFLICT (worker_key) DO UPDATE SET name=excluded.name, pool=excluded.pool,"
    " kind=excluded.kind, host=excluded.host, pid=excluded.pid, version=excluded.version,"
    " last_seen=excluded.last_seen, ttl=excluded.ttl, lost_at=NULL, owner=excluded.owner"
    f" RETURNING {workers.WORKER_COLS}"
)
NS_WORKERS = 0x6D70_0006
"""The advisory lock of a check-in: the name's binding is read and written at once."""


class WorkerTable(Tables):
    def record_worker(self, row: workers.WorkerRow) -> workers.WorkerRow:
        with self.txn() as conn:
            self.lock_key(conn, NS_WORKERS, 0)
            held = conn.execute(
                self.sql(f"SELECT {workers.WORKER_COLS} FROM worker WHERE name=? OR worker_key=?"),
                (row.name, row.worker_key),
            ).fetchall()
            workers.check_bound(row, workers.decode(held))
            stored = conn.execute(
                self.sql(_RECORD),
                (
                    row.worker_key,
                    row.name,
                    row.pool,
                    row.kind,
                    row.host,
                    row.pid,
                    row.version,
                    row.started_at,
                    row.last_seen,
                    row.ttl,
                    row.owner,
                ),
            ).fetchone()
        return workers.decode([stored])[0]

    def list_workers(self) -> list[workers.WorkerRow]:
        return workers.decode(
            self.rows(f"SELECT {workers.WORKER_COLS} FROM worker ORDER BY name, worker_key")
        )

    def mark_lost_workers(self, now: float) -> list[workers.WorkerRow]:
        with self.txn() as conn:
            lost = workers.decode(
                conn.execute(
                    self.sql(
                        f"SELECT {workers.WORKER_COLS} FROM worker WHERE lost_at IS NULL"
                        " AND last_seen + ttl <= ? ORDER BY name, worker_key"
                    ),
                    (now,),
                ).fetchall()
            )
            for row in lost:
                conn.execute(
                    self.sql("UPDATE worker SET lost_at=? WHERE worker_key=? AND last_seen=?"),
                    (now, row.worker_key, row.last_seen),
                )
        return lost

    def forget_workers(
        self,
        *,
        worker_key: str | None = None,
        seen_before: float | None = None,
        owner: str | None = None,
    ) -> int:
        if worker_key is not None:
            return int(
                self._write(
                    "DELETE FROM worker WHERE worker_key=? AND COALESCE(owner, '')=?",
                    (worker_key, owner or ""),
                )
            )
        if seen_before is not None:
            return int(self._write("DELETE FROM worker WHERE last_seen<?", (seen_before,)))
        return 0
