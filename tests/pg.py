"""Fresh PostgreSQL databases for the tests of one session, cloned from a migrated template.

`MILEPOST_TEST_PG_URL` (default `postgresql://postgres@127.0.0.1:5432/postgres`) is the
maintenance connection. When it cannot be reached the PostgreSQL tests are skipped,
except under `CI=true`, where they fail: CI never skips them.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from milepost.store.postgres import PostgresStore
from tests.shared import IN_CI

PG_URL_ENV = "MILEPOST_TEST_PG_URL"
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
_DROPPERS = 6


class PgDatabases:
    """Creates and drops the test databases of one session."""

    def __init__(self, admin_url: str, prefix: str = "milepost") -> None:
        self.admin_url = admin_url
        self.prefix = prefix
        self._admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
        self._n = itertools.count(1)
        self._names: list[str] = []
        self.template = f"{prefix}_tpl_{os.getpid()}"
        # a DROP DATABASE waits for a checkpoint: drops run in the background, on several
        # connections so that concurrent ones share a checkpoint, while the next tests run
        self._drops: queue.Queue[str | None] = queue.Queue()
        self._droppers = [
            threading.Thread(target=self._drop_loop, args=(admin_url,), daemon=True)
            for _ in range(_DROPPERS)
        ]
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
        name = f"{self.prefix}_t_{os.getpid()}_{next(self._n)}"
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


def session_databases(prefix: str) -> Iterator[PgDatabases]:
    """The body of a session fixture: skip (or, under CI, fail) when PostgreSQL is away."""
    url = os.environ.get(PG_URL_ENV, DEFAULT_PG_URL)
    try:
        dbs = PgDatabases(url, prefix)
    except psycopg.Error as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL at {url} is unreachable and CI=true: {exc}")
        pytest.skip(f"PostgreSQL at {url} is unreachable ({exc}); set {PG_URL_ENV}")
    try:
        dbs.make_template()
        yield dbs
    finally:
        dbs.close()
