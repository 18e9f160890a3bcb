"""The `execution` rows of a SQL store: one run, the list's keyset pages (migration 13's
indexes), the change stream's rows past a cursor, the list's progress. `SQLStore`
inherits this."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from milepost.core import events as ev
from milepost.store import port
from milepost.store.tables import Tables

EXEC_COLS = (
    "execution_id, path, version, status, created_at, updated_at,"
    " parent_execution_id, error, cancel_requested, started_by"
)
"""The `execution` columns of a `port.ExecutionRow`, in its order."""


class ExecutionTable(Tables):
    @staticmethod
    def _execution(row: Sequence[Any]) -> port.ExecutionRow:
        xid, path, version, status, created, updated, parent, error, cancel, by = row
        return port.ExecutionRow(
            xid,
            path,
            version,
            status,
            created,
            updated,
            parent,
            json.loads(error) if error else None,
            bool(cancel),
            by,
        )

    def get_execution(self, execution_id: int) -> port.ExecutionRow | None:
        rows = self.rows(f"SELECT {EXEC_COLS} FROM execution WHERE execution_id=?", (execution_id,))
        return self._execution(rows[0]) if rows else None

    def list_executions(
        self,
        *,
        status: str | None = None,
        path: str | None = None,
        limit: int = 100,
        offset: int = 0,
        since: float | None = None,
        before: port.Keyset | None = None,
    ) -> list[port.ExecutionRow]:
        where: list[str] = []
        params: list[Any] = []
        if before is not None:  # a row comparison: one range of the (..., created_at, id) index
            where.append("(created_at, execution_id) < (?, ?)")
            params.extend(before)
        if since is not None:
            where.append("created_at>=?")
            params.append(since)
        if status:
            where.append("status=?")
            params.append(status.upper())
        if path:
            where.append("path=?")
            params.append(path)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self.rows(
            f"SELECT {EXEC_COLS} FROM execution {clause}"
            " ORDER BY created_at DESC, execution_id DESC LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [self._execution(r) for r in rows]

    def steps_exited(self, execution_ids: Sequence[int]) -> dict[int, int]:
        ids = list(dict.fromkeys(execution_ids))
        if not ids:
            return {}
        # each run's events are one range of event_execution_seq: a page's runs, not the log
        marks = ", ".join("?" * len(ids))
        rows = self.rows(
            "SELECT execution_id, COUNT(DISTINCT step) FROM event WHERE"
            f" execution_id IN ({marks}) AND event_type=?"
            " GROUP BY execution_id",
            (*ids, ev.STEP_EXIT),
        )
        return {int(r[0]): int(r[1]) for r in rows}

    def changed_executions(self, after: port.Keyset, limit: int) -> list[port.ExecutionRow]:
        rows = self.rows(
            f"SELECT {EXEC_COLS} FROM execution WHERE (updated_at, execution_id)"
            " > (?, ?) ORDER BY updated_at, execution_id LIMIT ?",
            (*after, limit),
        )
        return [self._execution(r) for r in rows]
