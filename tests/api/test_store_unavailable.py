"""A database that is locked or unreachable is a 503 with `Retry-After`, on every dialect:
the client retries, nothing of the database's own words (a path, a URL) reaches it."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from milepost.api.errors import RETRY_AFTER_S
from milepost.store import port
from milepost.store.sqlite import SQLiteStore
from tests.api.support import HELLO, Api


def test_a_store_that_is_unavailable_is_a_503_with_retry_after(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    xid = api.execute(HELLO)

    def down(*args: Any, **kw: Any) -> Any:
        raise port.StoreUnavailable(
            "database /secret/path/milepost.db: database is locked",
            url="sqlite:////secret/path/milepost.db",
        )

    monkeypatch.setattr(api.store, "get_execution", down)
    reply = api.get(f"/api/executions/{xid}")
    assert reply.status_code == 503 and reply.headers["Retry-After"] == str(RETRY_AFTER_S)
    body = reply.json()
    assert body["code"] == "store_unavailable" and body["retry_after"] == RETRY_AFTER_S
    assert "secret" not in reply.text


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # SQLite's own lock
def test_a_locked_sqlite_file_is_a_503_not_a_500(api: Api) -> None:
    assert isinstance(api.store, SQLiteStore)
    xid = api.execute(HELLO)
    with api.store.read() as conn:
        conn.execute("PRAGMA busy_timeout=50")  # the default waits 10 s for the lock
    other = sqlite3.connect(api.store.path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")  # another process holds the file
        reply = api.post(f"/api/executions/{xid}/cancel", {})
        assert reply.status_code == 503 and reply.headers["Retry-After"] == str(RETRY_AFTER_S)
        assert reply.json()["code"] == "store_unavailable"
    finally:
        other.close()
