"""Fixtures of the store contract suite: fresh databases for every test.

`make_store` runs each test against `sqlite` (a fresh WAL file), `postgres` (a fresh
database), `sharded` (a ShardedStore over two fresh PostgreSQL databases) and `memory`
(MemoryStores over one MemoryDatabase; tests that look at tables skip it).

PostgreSQL: `MILEPOST_TEST_PG_URL` (a URL; default
`postgresql://postgres@127.0.0.1:5432/postgres`) is the maintenance connection. A template
database `milepost_tpl_<pid>` is migrated once per session and every test clones it
(`CREATE DATABASE milepost_t_<pid>_<n> TEMPLATE ...`); all of them are dropped at the end.
When PostgreSQL cannot be reached the PostgreSQL tests are skipped, except under
`CI=true`, where they fail: CI never skips them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from milepost.store.memory import MemoryDatabase, MemoryStore
from milepost.store.postgres import PostgresStore
from milepost.store.sharded import ShardedStore
from milepost.store.sqlite import SQLiteStore
from tests.pg import PgDatabases, session_databases


@pytest.fixture(scope="session")
def pg() -> Iterator[PgDatabases]:
    yield from session_databases("milepost")


class StoreFactory:
    """Stores on ONE database (or one set of shards): several instances = several processes."""

    def __init__(self, kind: str, tmp_path: Path, pg_urls: list[str]) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.pg_urls = pg_urls
        self.opened: list[Any] = []
        self.memory = MemoryDatabase()

    def __call__(self) -> Any:
        store: Any
        if self.kind == "sqlite":
            store = SQLiteStore(self.tmp_path / "contract.db")
        elif self.kind == "memory":
            store = MemoryStore(self.memory)
        elif self.kind == "postgres":
            store = PostgresStore(self.pg_urls[0], min_size=1, max_size=4)
        else:
            store = ShardedStore([PostgresStore(u, min_size=1, max_size=4) for u in self.pg_urls])
        self.opened.append(store)
        return store


@pytest.fixture(params=["sqlite", "postgres", "sharded", "memory"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory of stores on ONE database (several instances = several processes)."""
    kind = str(request.param)
    dbs: PgDatabases | None = None
    urls: list[str] = []
    if kind in ("postgres", "sharded"):
        dbs = request.getfixturevalue("pg")
        urls = [dbs.create() for _ in range(1 if kind == "postgres" else 2)]
    factory = StoreFactory(kind, tmp_path, urls)
    yield factory
    for store in factory.opened:
        store.close()
    for url in urls:
        assert dbs is not None
        dbs.drop(url)


@pytest.fixture
def store(make_store: StoreFactory) -> Any:
    return make_store()
