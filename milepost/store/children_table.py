"""A run's running children in a SQL store (migration 9: the partial index
`execution_running_children`). `SQLStore` inherits this."""

from __future__ import annotations

from milepost.store.tables import Tables

# the status as a literal: the partial index's own predicate, so the planner can use it
_CHILDREN = (
    "SELECT execution_id FROM execution WHERE parent_execution_id=?"
    " AND status='RUNNING' ORDER BY execution_id"
)


class ChildrenTable(Tables):
    def running_children(self, execution_id: int) -> list[int]:
        return [int(r[0]) for r in self.rows(_CHILDREN, (execution_id,))]
