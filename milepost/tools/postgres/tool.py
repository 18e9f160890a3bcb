"""The postgres tool: a script run in order, in one transaction, on PostgreSQL (the DSL
of the tool is in the package's docstring); failures become the tool's error kinds."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from milepost.sanitize import Redactor
from milepost.tools import base, sql
from milepost.tools.postgres.connections import Connection, IdleConnections, connect
from milepost.tools.postgres.params import ToolInvalid, connection_params, dsn_key, redactor
from milepost.tools.postgres.statements import (
    bind_params,
    needs_autocommit,
    search_path,
    set_search_path,
)

RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})
"""serialization_failure, deadlock_detected: the transaction was rolled back, a retry is safe."""
QUERY_CANCELED = "57014"


@dataclass
class _Progress:
    """How far a call got, to tell a stale cached connection from a failing statement."""

    connected: bool = False
    statement: int = 0
    """1-based index of the statement running; 0 while connecting and setting up."""
    redactor: Redactor = field(default_factory=Redactor)


class PostgresTool:
    """Runs postgres tool calls; caches idle connections per event loop and DSN.

    Args:
        credentials: `name -> credential data (with its "type") | None`, resolving `auth`.
        max_idle: idle connections kept per event loop and connection parameters.
        idle_timeout: seconds an idle connection may wait before it is closed.
    """

    def __init__(
        self,
        credentials: base.CredentialLookup | None = None,
        *,
        max_idle: int = 4,
        idle_timeout: float = 60.0,
    ) -> None:
        self.credentials = credentials
        self.connections = IdleConnections(max_idle, idle_timeout)

    async def run(self, call: base.ToolCall) -> base.ToolResult:
        progress = _Progress()
        try:
            statements = sql.script_statements(call.config.get("query", call.config.get("command")))
            if statements is None:
                raise ToolInvalid(
                    "postgres tool needs `command` or `query` (a string or a list of strings)"
                )
            if not statements:
                raise ToolInvalid("postgres script holds no statement")
            params = connection_params(call.config, self.credentials)
            progress.redactor = redactor(params, call.config)
            chunks = bind_params(statements, call.config.get("params"))
            schema = search_path(call.config.get("schema"))
        except ToolInvalid as exc:
            return base.failure("invalid", progress.redactor.text(str(exc)))
        try:
            async with asyncio.timeout(call.timeout):
                data = await self._run(params, chunks, schema, progress)
        except TimeoutError:
            return base.failure(
                "timeout",
                f"postgres script exceeded timeout of {call.timeout or 0:g}s",
                code="Timeout",
                retryable=True,
            )
        except psycopg.Error as exc:
            return _error(exc, progress, len(chunks))
        if progress.redactor:
            data = progress.redactor.value(data)
        return base.ToolResult(data=data)

    async def aclose(self) -> None:
        """Close the idle connections of the running loop; drop those of other loops."""
        await self.connections.aclose()

    def close(self) -> None:
        """Close every idle connection (sync: libpq's close does not wait)."""
        self.connections.close()

    async def _run(
        self,
        params: dict[str, Any],
        chunks: list[tuple[str, Any]],
        schema: list[str] | None,
        progress: _Progress,
    ) -> dict[str, Any]:
        key = dsn_key(params)
        conn = self.connections.checkout(key)
        reused = conn is not None
        if conn is None:
            conn = await connect(params)
        progress.connected = True
        try:
            try:
                data = await _execute(conn, chunks, schema, progress)
            except psycopg.OperationalError:
                if not (reused and progress.statement == 0 and conn.closed):
                    raise
                # a cached connection the server dropped while it was idle: once more, fresh
                await conn.close()
                progress.connected = False
                conn = await connect(params)
                progress.connected = True
                data = await _execute(conn, chunks, schema, progress)
        except BaseException:
            await conn.close()
            raise
        await self.connections.release(key, conn)
        return data


async def _execute(
    conn: Connection,
    chunks: list[tuple[str, Any]],
    schema: list[str] | None,
    progress: _Progress,
) -> dict[str, Any]:
    """Run the statements; one transaction unless the script needs autocommit."""
    async with conn.cursor() as cur:
        if needs_autocommit([text for text, _ in chunks]):
            try:
                if schema:
                    await cur.execute(set_search_path(schema, local=False))
                return await _statements(cur, chunks, progress)
            finally:
                if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                    with contextlib.suppress(psycopg.Error):
                        await conn.rollback()  # a BEGIN without COMMIT, or a failed block
        async with conn.transaction():
            if schema:
                await cur.execute(set_search_path(schema, local=True))
            return await _statements(cur, chunks, progress)


async def _statements(
    cur: psycopg.AsyncCursor[tuple[Any, ...]],
    chunks: list[tuple[str, Any]],
    progress: _Progress,
) -> dict[str, Any]:
    results = []
    for index, (text, values) in enumerate(chunks, start=1):
        progress.statement = index
        if values is None:
            await cur.execute(text)
        else:
            await cur.execute(text, values)
        results.append(await _statement_result(cur))
    return sql.script_result(results)


async def _statement_result(cur: psycopg.AsyncCursor[tuple[Any, ...]]) -> dict[str, Any]:
    if cur.description is None:
        return {"affected_rows": max(cur.rowcount, 0)}
    columns = [column.name for column in cur.description]
    rows = [
        {name: sql.to_json_value(value) for name, value in zip(columns, row, strict=True)}
        for row in await cur.fetchall()
    ]
    return {"columns": columns, "rows": rows, "row_count": len(rows)}


def _error(exc: psycopg.Error, progress: _Progress, count: int) -> base.ToolResult:
    message = progress.redactor.text(str(exc).strip() or type(exc).__name__)
    sqlstate = exc.sqlstate
    if not progress.connected or _connection_lost(exc):
        prefix = "cannot connect to PostgreSQL" if not progress.connected else "connection lost"
        return base.failure("db_connection", f"{prefix}: {message}", code=sqlstate, retryable=True)
    if count > 1 and progress.statement:
        message = f"statement {progress.statement} of {count}: {message}"
    if sqlstate == QUERY_CANCELED:
        return base.failure("timeout", message, code=sqlstate, retryable=True)
    return base.failure(
        "db_error",
        message,
        code=sqlstate or type(exc).__name__,
        retryable=sqlstate in RETRYABLE_SQLSTATES,
    )


def _connection_lost(exc: psycopg.Error) -> bool:
    if isinstance(exc, pg_errors.AdminShutdown | pg_errors.CrashShutdown):
        return True
    if exc.sqlstate is not None:
        return exc.sqlstate.startswith("08")
    return isinstance(exc, psycopg.OperationalError)
