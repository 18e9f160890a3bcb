"""Migrations that fill a new column from the log, on both dialects: a database from before
the migration (the column empty, its version row absent) is opened and upgraded."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from milepost.core import events as ev
from milepost.store import migrations
from milepost.store.postgres import PostgresStore
from milepost.store.sqlite import SQLiteStore
from tests.contract.test_store import new_id

_BEFORE_14 = [
    "UPDATE execution SET started_by = NULL",
    # what the later migrations added, so that they run again (16: the owners)
    "ALTER TABLE machine_lease DROP COLUMN owner",
    "ALTER TABLE machine_lease DROP COLUMN leased_at",
    "ALTER TABLE worker DROP COLUMN owner",
    "DELETE FROM schema_version WHERE version >= 14",
]


def _started(xid: int, **payload: Any) -> ev.Event:
    return ev.new_event(
        new_id(), xid, ev.EXECUTION_STARTED, 1.0, payload={"path": "p", "version": 1, **payload}
    )


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_version_14_fills_in_who_started_the_runs_of_an_older_database(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    reopen: Any
    if dialect == "sqlite":
        path = tmp_path / "v13.db"
        store: Any = SQLiteStore(path)
        reopen = lambda: SQLiteStore(path)  # noqa: E731

        def rewind() -> None:
            with sqlite3.connect(path) as conn:
                for text in _BEFORE_14:
                    conn.execute(text)
    else:
        pg = request.getfixturevalue("pg")
        url = pg.create(empty=True)
        request.addfinalizer(lambda: pg.drop(url))
        store = PostgresStore(url, min_size=1, max_size=1)
        reopen = lambda: PostgresStore(url, min_size=1, max_size=1)  # noqa: E731

        def rewind() -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                for text in _BEFORE_14:
                    conn.execute(text.encode())

    store.append(
        [_started(1, started_by="user:ann"), _started(2), _started(3, started_by="token:ci")]
    )
    store.close()
    rewind()
    store = reopen()
    try:
        assert store.schema_version() == len(migrations.scripts(dialect)) >= 14
        assert [store.get_execution(x).started_by for x in (1, 2, 3)] == [
            "user:ann",
            None,
            "token:ci",
        ]
    finally:
        store.close()
