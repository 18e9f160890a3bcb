"""The `attempt_log` table of a SQL store (`store.attempt_logs`; `SQLStore` inherits this)."""

from __future__ import annotations

from collections.abc import Sequence

from milepost.store.attempt_logs import LOG_PAGE, LogRow
from milepost.store.tables import Tables

_COLS = "execution_id, step, command_id, attempt, event_id, stream, text, cut, created_at"
_ADD = (
    f"INSERT INTO attempt_log ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?)"
    " ON CONFLICT (event_id, stream) DO NOTHING"
)


class AttemptLogTable(Tables):
    def add_attempt_logs(self, rows: Sequence[LogRow]) -> int:
        if not rows:
            return 0
        with self.txn() as conn:  # one batch (on PostgreSQL one round trip, not one a row)
            return self.many(
                conn,
                _ADD,
                [
                    (
                        r.execution_id,
                        r.step,
                        r.command_id,
                        r.attempt,
                        r.event_id,
                        r.stream,
                        r.text,
                        r.cut,
                        r.created_at,
                    )
                    for r in rows
                ],
            )

    def attempt_logs(
        self, execution_id: int, *, step: str | None = None, after: int = 0, limit: int = LOG_PAGE
    ) -> list[LogRow]:
        where = "execution_id=? AND log_id>?"
        params: list[object] = [execution_id, after]
        if step is not None:
            where += " AND step=?"
            params.append(step)
        rows = self.rows(
            f"SELECT {_COLS}, log_id FROM attempt_log WHERE {where} ORDER BY log_id LIMIT ?",
            (*params, limit),
        )
        return [
            LogRow(int(x), s, int(c), int(a), int(e), st, t, int(cut), float(at), int(i))
            for x, s, c, a, e, st, t, cut, at, i in rows
        ]
