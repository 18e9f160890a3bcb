"""The side effects table: every attempt of an effect step of the verify playbook writes
`(idempotency_key, operation_key, execution_id, kind)` into it, as a system outside the
engine would see the requests; the checks read it back.

SQLite: a file next to the database; PostgreSQL: the table `verify_effect` in it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milepost.settings import sqlite_path

TABLE = (
    "CREATE TABLE IF NOT EXISTS verify_effect (idempotency_key TEXT NOT NULL,"
    " operation_key TEXT NOT NULL, execution_id TEXT NOT NULL, kind TEXT NOT NULL)"
)


@dataclass(frozen=True, slots=True)
class Effect:
    idempotency_key: str
    operation_key: str
    execution_id: int
    kind: str
    """`flaky`, `charge` or `refund` (the playbook's effect steps)."""


def is_postgres(db_url: str) -> bool:
    return db_url.split("://", 1)[0].lower() in ("postgresql", "postgres")


def location(db_url: str) -> str:
    """What the playbook's effect steps are given (`workload.effects`): the PostgreSQL
    URL itself, or the path of the SQLite file next to the database file."""
    if is_postgres(db_url):
        return db_url
    return str(Path(sqlite_path(db_url)).with_suffix(".effects.db").resolve())


@contextmanager
def _connect(where: str) -> Iterator[Any]:
    if is_postgres(where):
        import psycopg

        with psycopg.connect(where, autocommit=True) as pg:
            yield pg
    else:
        with closing(sqlite3.connect(where, timeout=60)) as lite, lite:
            yield lite


def create(where: str) -> None:
    """An empty table (a second suite on the same database starts from nothing)."""
    with _connect(where) as conn:
        conn.execute(TABLE)
        conn.execute("DELETE FROM verify_effect")


def read(where: str) -> list[Effect]:
    with _connect(where) as conn:
        rows = conn.execute(
            "SELECT idempotency_key, operation_key, execution_id, kind FROM verify_effect"
        ).fetchall()
    return [Effect(str(r[0]), str(r[1]), int(r[2]), str(r[3])) for r in rows]
