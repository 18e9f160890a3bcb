"""Fixtures of the API suite: a server per test on a fresh database.

Every test runs against `sqlite` (a fresh file in tmp_path) and `postgres` (a fresh
database cloned from a migrated template). PostgreSQL: `MILEPOST_TEST_PG_URL` (default
`postgresql://postgres@127.0.0.1:5432/postgres`) is the maintenance connection; when it
cannot be reached the PostgreSQL runs are skipped, except under `CI=true`, where they fail.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from milepost.store.postgres import PostgresStore
from tests.api.support import Api, start_server

PG_URL_ENV = "MILEPOST_TEST_PG_URL"
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


class PgDatabases:
    """Fresh databases for the tests of one session, cloned from a migrated template."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self._admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
        self._n = itertools.count(1)
        self.template = f"milepost_api_tpl_{os.getpid()}"
        self._names: list[str] = []

    def url(self, name: str) -> str:
        return urlunsplit(urlsplit(self.admin_url)._replace(path=f"/{name}"))

    def make_template(self) -> None:
        self._admin.execute(f'DROP DATABASE IF EXISTS "{self.template}" WITH (FORCE)')
        self._admin.execute(f'CREATE DATABASE "{self.template}"')
        self._names.append(self.template)
        PostgresStore(self.url(self.template), min_size=1, max_size=1).close()  # migrates

    def create(self) -> str:
        name = f"milepost_api_{os.getpid()}_{next(self._n)}"
        self._admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self._names.append(name)
        return self.url(name)

    def drop(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        self._admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self._names:
            self._names.remove(name)

    def close(self) -> None:
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


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database for one test."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'api.db'}"
        return
    dbs: PgDatabases = request.getfixturevalue("pg")
    url = dbs.create()
    try:
        yield url
    finally:
        dbs.drop(url)


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    """A running server (no background reconciler: tests tick it with their own clock)."""
    with start_server(db_url) as server:
        yield server
