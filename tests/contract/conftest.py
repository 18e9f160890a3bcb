"""Fixtures of the store contract suite: fresh databases for every test.

`make_store` runs each test against `sqlite` (a fresh WAL file), `postgres` (a fresh
database) and `sharded` (a ShardedStore over two fresh PostgreSQL databases).

PostgreSQL: `MILEPOST_TEST_PG_URL` (a URL; default
`postgresql://postgres@127.0.0.1:5432/postgres`) is the maintenance connection. A template
database `milepost_tpl_<pid>` is migrated once per session and every test clones it
(`CREATE DATABASE milepost_t_<pid>_<n> TEMPLATE ...`); all of them are dropped at the end.
When PostgreSQL cannot be reached the PostgreSQL tests are skipped, except under
`CI=true`, where they fail: CI never skips them.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from milepost.store.postgres import PostgresStore
from milepost.store.sharded import ShardedStore
from milepost.store.sqlite import SQLiteStore

PG_URL_ENV = "MILEPOST_TEST_PG_URL"
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
_DROPPERS = 6


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


class PgDatabases:
    """Creates and drops the test databases of one session."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self._admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
        self._n = itertools.count(1)
        self._names: list[str] = []
        self.template = f"milepost_tpl_{os.getpid()}"
        # a DROP DATABASE waits for a checkpoint: drops run in the background, on several
        # connections so that concurrent ones share a checkpoint, while the next tests run
        self._drops: queue.Queue[str | None] = queue.Queue()
        self._droppers = [threading.Thread(target=self._drop_loop, args=(admin_url,), daemon=True)
                          for _ in range(_DROPPERS)]  # fmt: skip
        for dropper in self._droppers:
            dropper.start()

    def url(self, dbname: str, password: str | None = None) -> str:
        parts = urlsplit(self.admin_url)
        netloc = parts.netloc
        if password is not None:
            user, host = netloc.rsplit("@", 1) if "@" in netloc else ("postgres", netloc)
            netloc = f"{user.split(':', 1)[0]}:{password}@{host}"
        return urlunsplit(parts._replace(netloc=netloc, path=f"/{dbname}"))

    def make_template(self) -> None:
        self._admin.execute(f'DROP DATABASE IF EXISTS "{self.template}" WITH (FORCE)')
        self._admin.execute(f'CREATE DATABASE "{self.template}"')
        self._names.append(self.template)
        PostgresStore(self.url(self.template), min_size=1, max_size=1).close()  # migrates

    def create(self, *, empty: bool = False) -> str:
        """A fresh database (a clone of the migrated template, or empty) -> its URL."""
        name = f"milepost_t_{os.getpid()}_{next(self._n)}"
        source = "template0" if empty else self.template
        self._admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
        self._names.append(name)
        return self.url(name)

    def drop(self, url: str) -> None:
        """Drop soon, in the background (the stores on it must be closed)."""
        self._drops.put(urlsplit(url).path.lstrip("/"))

    def _drop_loop(self, admin_url: str) -> None:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
            while (name := self._drops.get()) is not None:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        for _ in self._droppers:
            self._drops.put(None)
        for dropper in self._droppers:
            dropper.join(120)
        # then whatever is left, the template last (clones are made from it)
        for name in sorted(self._names, key=lambda n: n == self.template):
            self._admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._admin.close()


@pytest.fixture(scope="session")
def pg() -> Iterator[PgDatabases]:
    url = os.environ.get(PG_URL_ENV, DEFAULT_PG_URL)
    try:
        dbs = PgDatabases(url)
    except psycopg.Error as exc:
        if in_ci():
            pytest.fail(f"PostgreSQL at {url} is unreachable and CI=true: {exc}")
        pytest.skip(f"PostgreSQL at {url} is unreachable ({exc}); set {PG_URL_ENV}")
    try:
        dbs.make_template()
        yield dbs
    finally:
        dbs.close()


class StoreFactory:
    """Stores on ONE database (or one set of shards): several instances = several processes."""

    def __init__(self, kind: str, tmp_path: Path, pg_urls: list[str]) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.pg_urls = pg_urls
        self.opened: list[Any] = []

    def __call__(self) -> Any:
        store: Any
        if self.kind == "sqlite":
            store = SQLiteStore(self.tmp_path / "contract.db")
        elif self.kind == "postgres":
            store = PostgresStore(self.pg_urls[0], min_size=1, max_size=4)
        else:
            store = ShardedStore([PostgresStore(u, min_size=1, max_size=4) for u in self.pg_urls])
        self.opened.append(store)
        return store


@pytest.fixture(params=["sqlite", "postgres", "sharded"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory of stores on ONE database (several instances = several processes)."""
    kind = str(request.param)
    dbs: PgDatabases | None = None
    urls: list[str] = []
    if kind != "sqlite":
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
