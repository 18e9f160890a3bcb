"""Raw SQL on a store's database, for tests that look at its tables (production code
has no such hook): `query(store, sql, params)` with `?` placeholders on every dialect."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest

from milepost.store.memory import MemoryStore
from milepost.store.postgres import PostgresStore
from milepost.store.sharded import ShardedStore
from milepost.store.sqlite import SQLiteStore

_COUNT = re.compile(r"^\s*select\s+count\s*\(", re.IGNORECASE)


def query(store: Any, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """The statement's rows (none for a statement without any). A ShardedStore runs it on
    every shard, rows concatenated in shard order; a `SELECT count(...)` there answers one
    row of sums instead. A test that looks at tables skips on a MemoryStore."""
    if isinstance(store, ShardedStore):
        answers = [query(shard, sql, params) for shard in store.stores]
        if _COUNT.match(sql) and all(len(rows) == 1 for rows in answers):
            return [tuple(sum(col) for col in zip(*(rows[0] for rows in answers), strict=True))]
        return [row for rows in answers for row in rows]
    if isinstance(store, PostgresStore):
        if params:
            sql = sql.replace("%", "%%").replace("?", "%s")
        with store.read() as conn:
            cur = conn.execute(sql, params or None)
            return cur.fetchall() if cur.description else []
    if isinstance(store, SQLiteStore):
        with store.read() as lite:
            cur = lite.execute(sql, params)
            return cur.fetchall() if cur.description else []
    if isinstance(store, MemoryStore):
        pytest.skip("a memory store has no tables to look at")
    raise TypeError(f"no SQL behind {type(store).__name__}")
