"""Open the store a database URL names; `upgrade` for `milepost db upgrade`.

- a plain path, `sqlite:///path` (or `sqlite://` for memory) -> SQLiteStore
- `postgresql://...` or `postgres://...` -> PostgresStore
- several URLs (`urls=`, or `MILEPOST_DATABASE_URLS`, comma-separated) -> ShardedStore
  over them, in that order (the order places executions: keep it fixed)

Without a URL: the settings' `database_urls` (`MILEPOST_DATABASE_URLS`) if set, else their
`database_url` (`MILEPOST_DATABASE_URL`), else the embedded default `.milepost/milepost.db`.
"""

from __future__ import annotations

from milepost.errors import MilepostError
from milepost.settings import DEFAULT_DB, Settings, UnsupportedDatabase, sqlite_path
from milepost.store import pg_probe, port
from milepost.store.postgres import PostgresStore, mask_url
from milepost.store.sharded import ShardedStore
from milepost.store.sqlite import SQLiteStore

URLS_ENV = "MILEPOST_DATABASE_URLS"
"""Read through `Settings.database_urls`; named here for tests and messages."""


def open_store(
    url: str | None = None, *, urls: list[str] | None = None, settings: Settings | None = None
) -> port.Store:
    """The store for `url`, or a ShardedStore over `urls` when there are several; with
    neither, the one `settings` (default: the environment's) name."""
    if url is not None and urls is not None:
        raise MilepostError("give one database URL or a list of them, not both")
    settings = settings or Settings()
    if url is None and urls is None:
        urls = settings.shard_urls() or None
    if urls is None:
        return _open_one(url or settings.database_url or DEFAULT_DB, settings)
    if not urls:
        raise UnsupportedDatabase("no database URL given")
    if len(urls) == 1:
        return _open_one(urls[0], settings)
    opened: list[port.Store] = []
    try:
        for one in urls:
            opened.append(_open_one(one, settings))
    except BaseException:
        for store in opened:
            store.close()
        raise
    return ShardedStore(opened)


def _open_one(url: str, settings: Settings) -> port.Store:
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("", "sqlite"):
        return SQLiteStore(sqlite_path(url, settings), synchronous=settings.sqlite_synchronous)
    if scheme in ("postgresql", "postgres"):
        pg_probe.probe(url, mask_url(url))
        return PostgresStore(url)
    masked = mask_url(url)
    raise UnsupportedDatabase(
        f"database URL {masked!r} is not supported (use a file path, sqlite:///path or "
        "postgresql://user@host/db)",
        url=masked,
    )


def describe(store: port.Store) -> str:
    """The database a store is on, password masked."""
    if isinstance(store, PostgresStore):
        return store.masked_url
    if isinstance(store, SQLiteStore):
        return f"sqlite:///{store.path}"
    return type(store).__name__


def upgrade(
    url: str | None = None, *, urls: list[str] | None = None, settings: Settings | None = None
) -> str:
    """Migrate the database(s) to the latest schema (those of `open_store`); one line per
    database, such as `database postgresql://milepost:***@db/milepost at schema version 2`."""
    store = open_store(url, urls=urls, settings=settings)  # every adapter migrates as it opens
    try:
        shards = store.stores if isinstance(store, ShardedStore) else [store]
        lines = []
        for shard in shards:
            lines.append(f"database {describe(shard)} at schema version {shard.schema_version()}")
        return "\n".join(lines)
    finally:
        store.close()
