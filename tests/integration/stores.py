"""The store a test runs on, SQLite or PostgreSQL by the fixture's param."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from milepost.store import port
from milepost.store.postgres import PostgresStore
from milepost.store.sqlite import SQLiteStore
from tests.pg import PgDatabases


class SnapshotsSeen(SQLiteStore):
    """A SQLite store that remembers each snapshot it saves: (seq, bytes), in order."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.saved: list[tuple[int, int]] = []

    def save_snapshot(self, execution_id: int, seq: int, data: bytes) -> None:
        self.saved.append((seq, len(data)))
        super().save_snapshot(execution_id, seq, data)


def either(request: pytest.FixtureRequest, db: Path, *, max_size: int) -> Iterator[port.Store]:
    """The body of a `store` fixture with params "sqlite" and "postgres": a SQLite file at
    `db`, or a fresh database of the module's `pg` fixture (dropped after)."""
    if request.param == "sqlite":
        lite = SQLiteStore(db)
        yield lite
        lite.close()
        return
    dbs: PgDatabases = request.getfixturevalue("pg")
    url = dbs.create()
    pgs = PostgresStore(url, min_size=1, max_size=max_size)
    try:
        yield pgs
    finally:
        pgs.close()
        dbs.drop(url)
