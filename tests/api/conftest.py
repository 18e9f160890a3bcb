"""Fixtures of the API suite: a server per test on a fresh database.

Every test runs against `sqlite` (a fresh file in tmp_path) and `postgres` (a fresh
database cloned from a migrated template). PostgreSQL: `MILEPOST_TEST_PG_URL` (default
`postgresql://postgres@127.0.0.1:5432/postgres`) is the maintenance connection; when it
cannot be reached the PostgreSQL runs are skipped, except under `CI=true`, where they fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.support import Api, FakeClock, start_server
from tests.pg import PgDatabases, session_databases


@pytest.fixture(scope="session")
def pg() -> Iterator[PgDatabases]:
    yield from session_databases("milepost_api")


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


@pytest.fixture
def clock() -> FakeClock:
    """The clock of `fake`, moved by the test."""
    return FakeClock()


@pytest.fixture
def fake(db_url: str, clock: FakeClock) -> Iterator[Api]:
    """A running server on `clock`: leases, timers and grace periods end when the test
    moves it."""
    with start_server(db_url, clock=clock) as server:
        yield server
