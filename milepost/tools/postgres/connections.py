"""The connections of the postgres tool: opened with lenient value loaders, cached idle
per event loop and connection parameters, reset with `DISCARD ALL` before reuse."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import AdaptersMap, Loader
from psycopg.pq import Format, TransactionStatus

Connection = psycopg.AsyncConnection[tuple[Any, ...]]


class _LenientLoader(Loader):
    """Delegates to the default loader; values Python cannot hold (dates `infinity`, BC
    dates, years past 9999) load as their PostgreSQL text instead of failing the call."""

    inner: type[Loader]

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        self._inner = self.inner(oid, context)

    def load(self, data: Buffer) -> Any:
        try:
            return self._inner.load(data)
        except psycopg.DataError:
            return bytes(data).decode("utf-8", "replace")


def _adapters() -> AdaptersMap:
    adapters = AdaptersMap(psycopg.adapters)
    for type_name in ("date", "timestamp", "timestamptz"):
        info = psycopg.adapters.types[type_name]
        inner = psycopg.adapters.get_loader(info.oid, Format.TEXT)
        if inner is None:
            continue
        loader = type(f"Lenient{type_name.title()}Loader", (_LenientLoader,), {"inner": inner})
        adapters.register_loader(info.oid, loader)
    return adapters


_ADAPTERS = _adapters()


async def connect(params: dict[str, Any]) -> Connection:
    return await psycopg.AsyncConnection.connect(
        autocommit=True, prepare_threshold=None, context=_ADAPTERS, **params
    )


@dataclass
class _Idle:
    conn: Connection
    since: float


class IdleConnections:
    """Idle connections by event loop and connection parameters (a key of `params.dsn_key`):
    a connection belongs to the loop that opened it, so each loop reuses only its own.

    Args:
        max_idle: idle connections kept per event loop and connection parameters.
        idle_timeout: seconds an idle connection may wait before it is closed.
    """

    def __init__(self, max_idle: int, idle_timeout: float) -> None:
        self.max_idle = max_idle
        self.idle_timeout = idle_timeout
        # the tool may be shared by threads that each run their own loop
        self._lock = threading.Lock()
        self._idle: dict[asyncio.AbstractEventLoop, dict[str, list[_Idle]]] = {}

    def checkout(self, key: str) -> Connection | None:
        """An idle connection of the running loop for `key`, if one is fresh enough."""
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        stale: list[Connection] = []
        found: Connection | None = None
        with self._lock:
            for owner in [o for o in self._idle if o.is_closed()]:
                stale.extend(i.conn for e in self._idle.pop(owner).values() for i in e)
            entries = self._idle.get(loop, {}).get(key, [])
            while entries:
                idle = entries.pop()
                if now - idle.since > self.idle_timeout or idle.conn.closed:
                    stale.append(idle.conn)
                else:
                    found = idle.conn
                    break
        for conn in stale:
            conn.pgconn.finish()
        return found

    async def release(self, key: str, conn: Connection) -> None:
        """Keep `conn` for the next call, reset (`DISCARD ALL`), or close it."""
        if self.max_idle <= 0 or conn.closed:
            await conn.close()
            return
        try:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                await conn.rollback()
            await conn.execute("DISCARD ALL")
        except psycopg.Error:
            await conn.close()
            return
        loop = asyncio.get_running_loop()
        with self._lock:
            entries = self._idle.setdefault(loop, {}).setdefault(key, [])
            if len(entries) < self.max_idle:
                entries.append(_Idle(conn, time.monotonic()))
                return
        await conn.close()

    async def aclose(self) -> None:
        """Close the idle connections of the running loop; drop those of other loops."""
        loop = asyncio.get_running_loop()
        with self._lock:
            pools, self._idle = self._idle, {}
        for owner, by_dsn in pools.items():
            for idle in (i for entries in by_dsn.values() for i in entries):
                if owner is loop:
                    await idle.conn.close()
                else:
                    idle.conn.pgconn.finish()

    def close(self) -> None:
        """Close every idle connection (sync: libpq's close does not wait)."""
        with self._lock:
            pools, self._idle = self._idle, {}
        for by_dsn in pools.values():
            for idle in (i for entries in by_dsn.values() for i in entries):
                idle.conn.pgconn.finish()
