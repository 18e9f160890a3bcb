"""The `worker` table of a SQL store (the workers registry, `store.workers`); `SQLStore`
inherits this."""

from __future__ import annotations

from milepost.store import workers
from milepost.store.tables import Tables

_RECORD = (
    f"INSERT INTO worker ({workers.WORKER_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,NULL)"
    " ON CONFLICT (worker_key) DO UPDATE SET name=excluded.name, pool=excluded.pool,"
    " kind=excluded.kind, host=excluded.host, pid=excluded.pid, version=excluded.version,"
    " last_seen=excluded.last_seen, ttl=excluded.ttl, lost_at=NULL"
    f" RETURNING {workers.WORKER_COLS}"
)


class WorkerTable(Tables):
    def record_worker(self, row: workers.WorkerRow) -> workers.WorkerRow:
        stored = self._write(
            _RECORD,
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
            ),
        )
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
        self, *, worker_key: str | None = None, seen_before: float | None = None
    ) -> int:
        if worker_key is not None:
            return int(self._write("DELETE FROM worker WHERE worker_key=?", (worker_key,)))
        if seen_before is not None:
            return int(self._write("DELETE FROM worker WHERE last_seen<?", (seen_before,)))
        return 0
