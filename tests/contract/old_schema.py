"""A database that an older release left: made by the first migrations only, with rows of
that time in it, then opened by today's store (which migrates it the rest of the way)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from milepost.store import migrations
from milepost.store.postgres import PostgresStore
from milepost.store.sqlite import SQLiteStore


def store_at_version(
    dialect: str,
    version: int,
    rows: Sequence[str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Any:
    """A store of `dialect` on a database at schema `version` holding `rows` (INSERTs of
    that schema's tables). PostgreSQL: a fresh database, dropped after the test."""
    sql = "\n".join(m.sql for m in migrations.scripts(dialect)[:version])
    if dialect == "sqlite":
        path = tmp_path / f"v{version}.db"
        conn = sqlite3.connect(path)
        conn.executescript(
            sql + "\nCREATE TABLE schema_version (version INTEGER NOT NULL);"
            f"\nINSERT INTO schema_version VALUES ({version});\n" + ";\n".join(rows) + ";"
        )
        conn.close()
        return SQLiteStore(path)
    pg = request.getfixturevalue("pg")
    url = pg.create(empty=True)
    request.addfinalizer(lambda: pg.drop(url))
    with psycopg.connect(url, autocommit=True) as conn_pg:
        conn_pg.execute(sql.encode())
        conn_pg.execute(
            "CREATE TABLE schema_version (version INTEGER NOT NULL);"
            f" INSERT INTO schema_version VALUES ({version})"
        )
        for row in rows:
            conn_pg.execute(row.encode())
    return PostgresStore(url, min_size=1, max_size=1)
