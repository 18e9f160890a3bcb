"""A run's running children (`running_children`): the executions whose `execution.started`
names it as parent, while they run (on every adapter; the SQL stores through the partial
index of migration 9)."""

from __future__ import annotations

import itertools
from typing import Any

from milepost.core import events as ev
from milepost.store.sqlite import SQLiteStore

_ids = itertools.count(90_000)


def started(xid: int, parent: int | None = None) -> ev.Event:
    payload: dict[str, Any] = {"path": "p", "version": 1, "workload": {}}
    if parent is not None:
        payload["parent_execution_id"] = parent
    return ev.new_event(next(_ids), xid, ev.EXECUTION_STARTED, 100.0, payload=payload)


def test_the_running_children_of_a_run_are_found_by_their_parent(store: Any) -> None:
    store.append([started(1)])
    store.append([started(5, parent=1)])
    store.append([started(3, parent=1)])
    store.append([started(4, parent=2)])  # another run's
    store.append([started(6, parent=3)])  # a grandchild: its own parent's child
    store.append([ev.new_event(next(_ids), 5, ev.EXECUTION_COMPLETED, 101.0)])
    assert store.running_children(1) == [3]
    assert store.running_children(3) == [6]
    assert store.running_children(2) == [4]
    assert store.running_children(4) == []


def test_sqlite_finds_them_through_the_partial_index(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "plan.db")
    try:
        with store.txn() as conn:
            plan = conn.execute(
                "EXPLAIN QUERY PLAN SELECT execution_id FROM execution WHERE"
                " parent_execution_id=? AND status='RUNNING'",
                (1,),
            ).fetchall()
    finally:
        store.close()
    assert "execution_running_children" in " ".join(str(row) for row in plan)
