"""The `execution_usage` table of a SQL store: its projection statement and its reads
(`store.usage` computes the changes; `SQLStore` inherits this)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from milepost.store import usage
from milepost.store.tables import Tables

_ADD = (
    "INSERT INTO execution_usage (execution_id, provider, model, input_tokens,"
    " output_tokens, cost) VALUES (?,?,?,?,?,?) ON CONFLICT (execution_id, provider, model)"
    " DO UPDATE SET input_tokens=execution_usage.input_tokens+excluded.input_tokens,"
    " output_tokens=execution_usage.output_tokens+excluded.output_tokens,"
    " cost=execution_usage.cost+excluded.cost"
)
_COLS = "x.path, u.provider, u.model"


class UsageTable(Tables):
    def project_usage(self, conn: Any, ops: Sequence[usage.Op]) -> None:
        """Add a batch's usage in the append's transaction, one statement per row: two
        reports of one batch may name the same row."""
        for op in ops:
            conn.execute(self.sql(_ADD), op)

    def execution_usage(self, execution_id: int) -> list[usage.UsageRow]:
        rows = self.rows(
            f"SELECT {_COLS}, u.input_tokens, u.output_tokens, u.cost FROM"
            " execution_usage u JOIN execution x ON x.execution_id=u.execution_id"
            " WHERE u.execution_id=? ORDER BY u.provider, u.model",
            (execution_id,),
        )
        return usage.decode(rows, execution_id)

    def playbook_usage(self, path: str | None = None) -> list[usage.UsageRow]:
        where, params = (" WHERE x.path=?", (path,)) if path is not None else ("", ())
        rows = self.rows(
            f"SELECT {_COLS}, sum(u.input_tokens), sum(u.output_tokens),"
            " sum(u.cost) FROM execution_usage u JOIN execution x"
            f" ON x.execution_id=u.execution_id{where} GROUP BY {_COLS}"
            f" ORDER BY {_COLS}",
            params,
        )
        return usage.decode(rows)
