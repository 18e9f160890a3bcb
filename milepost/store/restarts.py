"""Restarts in a SQL store (`execution.restarted_from`): the projection of the link a
restart's `execution.started` names, and the read of an old run's restarts (`SQLStore`
inherits this)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from milepost.store.tables import Tables


class RestartTable(Tables):
    def project_restarts(self, conn: Any, restarts: Sequence[tuple[int, int]]) -> None:
        """Set the link of rows this append's `started` inserted."""
        self.many(conn, "UPDATE execution SET restarted_from=? WHERE execution_id=?", restarts)

    def restarts_of(self, execution_id: int) -> list[int]:
        # ids are made in time order: the oldest restart first
        rows = self.rows(
            "SELECT execution_id FROM execution WHERE restarted_from=? ORDER BY execution_id",
            (execution_id,),
        )
        return [int(r[0]) for r in rows]
