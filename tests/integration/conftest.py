"""Set-up shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from milepost.store.sqlite import SQLiteStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A SQLite store in the test's directory (a module that runs on PostgreSQL too has its
    own, with `stores.either`)."""
    s = SQLiteStore(tmp_path / "engine.db")
    yield s
    s.close()
