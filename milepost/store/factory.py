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
from milepost.store import pg_probe, port, sqlite
from milepost.store.postgres import PostgresStore, mask_url
from milepost.store.sharded import ShardedStore
from milepost.store.sqlite import SQLiteStore

START_HINT = (
    ": nothing has run in this folder (milepost run FILE starts a database here; --db or "
    "MILEPOST_DATABASE_URL names another)"
)
"""What a read on the default database that is not there adds to its NoDatabase."""
URLS_ENV = "MILEPOST_DATABASE_URLS"
"""Read through `Settings.database_urls`; named here for tests and messages."""


def open_store(
    url: str | None = None,
    *,
    urls: list[str] | None = None,
    settings: Settings | None = None,
    existing: bool = False,
) -> port.Store:
    """The store for `url`, or a ShardedStore over `urls` when there are several; with
    neither, the one `settings` (default: the environment's) name.

    `existing`: for a command that only reads, a database that is already there or
    NoDatabase, creating nothing (no folder, no file, no tables); one whose schema is
    behind is migrated, as every open does (it is milepost's already)."""
    if url is not None and urls is not None:
        raise MilepostError("give one database URL or a list of them, not both")
    settings = settings or Settings()
    if url is None and urls is None:
        urls = settings.shard_urls() or None
    if urls is None:
        return _open_one(url or settings.database_url or DEFAULT_DB, settings, existing)
    if not urls:
        raise UnsupportedDatabase("no database URL given")
    if len(urls) == 1:
        return _open_one(urls[0], settings, existing)
    opened: list[port.Store] = []
    try:
        for one in urls:
            opened.append(_open_one(one, settings, existing))
    except BaseException:
        for store in opened:
            store.close()
        raise
    return ShardedStore(opened)


def _open_one(url: str, settings: Settings, existing: bool) -> port.Store:
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("", "sqlite"):
        path = sqlite_path(url, settings)
        if existing:
            sqlite.check_existing(path, START_HINT if url == DEFAULT_DB else "")
        return SQLiteStore(path, synchronous=settings.sqlite_synchronous)
    if scheme in ("postgresql", "postgres"):
        masked = mask_url(url)
        pg_probe.probe(url, masked)  # DatabaseMissing: no database of that name
        store = PostgresStore(url, migrate=not existing)
        if existing:
            try:
                if store.schema_version() == 0:
                    raise port.NoDatabase(
                        f"no milepost database at {masked}: the database holds no milepost "
                        "tables (milepost db upgrade creates them)",
                        url=masked,
                    )
                store.migrate()
            except BaseException:
                store.close()
                raise
        return store
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
