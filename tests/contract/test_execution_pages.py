"""The runs list's reads on every adapter: keyset pages (`list_executions(before=)`) that
cover every row once, with the filters; the change rows past a cursor
(`changed_executions`); the progress (`steps_exited`); a page of a run's log read with
its LIMIT (`load(limit=)`). On SQLite and PostgreSQL each list page is one range of a
migration-13 index, with no sort."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.store.execution_table import EXEC_COLS
from milepost.store.postgres import PostgresStore
from milepost.store.sqlite import SQLiteStore

_ids = itertools.count(70_000)


def started(xid: int, at: float, path: str = "p", by: str | None = None) -> ev.Event:
    payload: dict[str, Any] = {"path": path, "version": 1, "workload": {}}
    if by is not None:
        payload["started_by"] = by
    return ev.new_event(next(_ids), xid, ev.EXECUTION_STARTED, at, payload=payload)


def ended(xid: int, at: float) -> ev.Event:
    return ev.new_event(next(_ids), xid, ev.EXECUTION_COMPLETED, at)


def runs(store: Any) -> list[int]:
    """Twelve runs over two playbooks, three pairs sharing a start time, every third ended."""
    xids = list(range(101, 113))
    for i, xid in enumerate(xids):
        store.append([started(xid, 1000.0 + i // 2, "a" if i % 3 else "b", by=f"user:u{i}")])
    for xid in xids[::3]:
        store.append([ended(xid, 2000.0 + xid)])
    return xids


def pages(store: Any, size: int, **where: Any) -> list[list[int]]:
    out: list[list[int]] = []
    before = None
    while True:
        rows = store.list_executions(limit=size, before=before, **where)
        out.append([r.execution_id for r in rows])
        if len(rows) < size:
            return out
        before = (rows[-1].created_at, rows[-1].execution_id)


@pytest.mark.parametrize("size", [1, 5, 12])
def test_keyset_pages_cover_every_row_once_in_the_list_order(store: Any, size: int) -> None:
    runs(store)
    whole = [r.execution_id for r in store.list_executions(limit=100)]
    assert len(whole) == 12
    got = pages(store, size)
    assert [x for page in got for x in page] == whole  # each once, newest first
    assert all(len(page) == size for page in got[:-1])


def test_keyset_pages_keep_the_filters(store: Any) -> None:
    runs(store)
    for where in (
        {"status": "COMPLETED"},
        {"path": "b"},
        {"path": "a", "status": "RUNNING"},
        {"since": 1003.0},
    ):
        whole = [r.execution_id for r in store.list_executions(limit=100, **where)]
        assert whole, where
        assert [x for page in pages(store, 2, **where) for x in page] == whole, where
    completed = store.list_executions(limit=100, status="COMPLETED")
    assert {r.status for r in completed} == {"COMPLETED"} and len(completed) == 4


def test_a_row_knows_who_started_it(store: Any) -> None:
    runs(store)
    assert store.get_execution(103).started_by == "user:u2"


def test_the_changes_past_a_cursor_in_updated_order(store: Any) -> None:
    xids = runs(store)
    changed = store.changed_executions((0.0, 0), 100)
    keys = [(r.updated_at, r.execution_id) for r in changed]
    assert keys == sorted(keys) and len(keys) == 12
    assert [r.execution_id for r in changed[-4:]] == xids[::3]  # the ended ones last
    after = keys[5]
    assert [(r.updated_at, r.execution_id) for r in store.changed_executions(after, 100)] == keys[
        6:
    ]
    assert len(store.changed_executions((0.0, 0), 3)) == 3


def test_steps_exited_counts_distinct_steps(store: Any) -> None:
    store.append([started(201, 1.0)])
    for step in ("a", "b", "a"):
        store.append(
            [ev.new_event(next(_ids), 201, ev.STEP_EXIT, 2.0, step=step, status="COMPLETED")]
        )
    store.append([started(202, 1.0)])
    assert store.steps_exited([201, 202, 999]) == {201: 2}
    assert store.steps_exited([]) == {}


def test_a_page_of_the_log_is_its_limit(store: Any) -> None:
    store.append([started(301, 1.0)])
    store.append(
        [ev.new_event(next(_ids), 301, ev.STEP_ENTER, 2.0, step=f"s{i}") for i in range(9)]
    )
    whole = store.load(301)
    assert [e.seq for e in store.load(301, after_seq=3, limit=4)] == [e.seq for e in whole[3:7]]
    assert store.load(301, after_seq=whole[-1].seq, limit=4) == []


_PAGE = (
    f"SELECT {EXEC_COLS} FROM execution WHERE {{where}}(created_at, execution_id) < (?, ?)"
    " ORDER BY created_at DESC, execution_id DESC LIMIT 50"
)
_WHERE = {
    "": "execution_created",
    "status='RUNNING' AND ": "execution_status",
    "path='a' AND ": "execution_path_created",
}


@pytest.mark.parametrize("where", list(_WHERE))
def test_sqlite_reads_a_page_along_its_index_without_a_sort(tmp_path: Any, where: str) -> None:
    store = SQLiteStore(tmp_path / "plan.db")
    try:
        with store.txn() as conn:
            plan = " ".join(
                str(r)
                for r in conn.execute(
                    "EXPLAIN QUERY PLAN " + _PAGE.format(where=where), (5.0, 5)
                ).fetchall()
            )
    finally:
        store.close()
    assert f"INDEX {_WHERE[where]} " in plan and "TEMP B-TREE" not in plan, plan


@pytest.mark.parametrize("where", list(_WHERE))
def test_postgres_reads_a_page_along_its_index_without_a_sort(pg: Any, where: str) -> None:
    url = pg.create()
    store = PostgresStore(url, min_size=1, max_size=2)
    try:
        runs(store)
        plan = _pg_plan(store, where)
    finally:
        store.close()
        pg.drop(url)
    assert f" {_WHERE[where]} " in plan and "Sort" not in plan, plan


def _pg_plan(store: PostgresStore, where: str) -> str:
    with store.txn() as conn:
        # a tiny table is cheapest scanned whole: ask for the plan a large one gets
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        text = "EXPLAIN " + _PAGE.format(where=where).replace("?", "%s")
        return " ".join(str(r[0]) for r in conn.execute(text, (5.0, 5)).fetchall())
