"""The postgres tool (DSL 3.3): a script run in order, in one transaction, on PostgreSQL.

```yaml
tool: {kind: postgres, auth: "{{ pg_auth }}", schema: sales,
       command: "SELECT id, profile FROM users WHERE id = %s", params: [7]}
```

- Connection: `auth` names a registered credential of type `postgres`, resolved through the
  `credentials` lookup of the `ToolRuntime` (data `host port user password database`, or
  the aliases `db_host db_port db_user db_password db_name`; the port may be a string), or
  `connection_string` gives a libpq connection string / URL. With both, the credential's
  fields override the string's.
- `command` (or `query`) is split by `sql.split_statements`; the statements run in order in
  one transaction, rolled back on error. A script that manages transactions itself (BEGIN,
  COMMIT, ...) or holds a statement PostgreSQL refuses inside a transaction block (VACUUM,
  CREATE DATABASE, ... CONCURRENTLY) runs statement by statement in autocommit mode instead.
- `params`: a list fills the positional `%s` placeholders in order, across statements
  (each statement takes as many values as it holds placeholders); a mapping fills
  `%(name)s` placeholders. Statements without placeholders run without parameters, so a
  literal `%` needs no escaping there. Mapping values are sent as JSON.
- `schema` (a name, a comma-separated list or a list) sets the `search_path` for the call.
- Result of the last statement: `{columns, rows, row_count}` when it returns rows (rows are
  objects, values converted by `sql.to_json_value`: json/jsonb -> JSON values, numerics ->
  numbers, dates and times -> ISO-8601 strings, uuid -> string, bytea -> base64; dates
  outside Python's range, such as `infinity`, stay text), else `{affected_rows}`.
- Errors: `db_error` with `code` = SQLSTATE (serialization failures and deadlocks are
  retryable: the transaction was rolled back); `db_connection` (retryable) when connecting
  fails or the connection is lost; `timeout` (retryable) past `ToolCall.timeout`, which
  covers connecting too and cancels the running statement on the server; `invalid` for a
  bad tool mapping or a missing or mistyped credential. The password (and the connection
  string) is masked (`sanitize.Redactor`) in every message and in the result.

Connections are cached per event loop and connection parameters (at most `max_idle` idle
ones, each idle at most `idle_timeout` seconds) and reset with `DISCARD ALL` before reuse,
so a call sees a fresh session. `aclose()` closes them; a connection that failed, timed out
or was cancelled is closed, never cached.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql as pg_sql
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import AdaptersMap, Loader
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import Format, TransactionStatus
from psycopg.types.json import Json

from milepost.errors import MilepostError
from milepost.sanitize import Redactor
from milepost.tools import base, sql

log = logging.getLogger(__name__)

Connection = psycopg.AsyncConnection[tuple[Any, ...]]

CREDENTIAL_TYPES = frozenset({"postgres", "postgresql"})
FIELD_ALIASES = {
    "host": "host",
    "db_host": "host",
    "port": "port",
    "db_port": "port",
    "user": "user",
    "username": "user",
    "db_user": "user",
    "password": "password",
    "db_password": "password",
    "database": "dbname",
    "dbname": "dbname",
    "db_name": "dbname",
}
"""Credential data keys -> libpq parameters."""
PASSTHROUGH = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslpassword",
        "application_name",
        "connect_timeout",
        "options",
        "target_session_attrs",
        "hostaddr",
    }
)
"""libpq parameters a credential may also carry, used as is."""
DEFAULT_CONNECT_TIMEOUT = 10
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})
"""serialization_failure, deadlock_detected: the transaction was rolled back, a retry is safe."""
QUERY_CANCELED = "57014"

_PLACEHOLDER = re.compile(r"%%|%\(([^)]+)\)[sbt]|%[sbt]")
"""psycopg's placeholders: `%s`, `%b`, `%t`, `%(name)s`; `%%` is a literal `%`."""
_NO_TRANSACTION = re.compile(
    r"^\s*(?:VACUUM|CREATE\s+DATABASE|DROP\s+DATABASE|ALTER\s+SYSTEM|CREATE\s+TABLESPACE"
    r"|DROP\s+TABLESPACE|(?:CREATE|DROP|REINDEX)\b.*\bCONCURRENTLY\b)",
    re.IGNORECASE | re.DOTALL,
)


class ToolInvalid(Exception):
    """The tool mapping or its credential cannot be used (error kind `invalid`)."""


# -- the executor ------------------------------------------------------------------------


@dataclass
class _Idle:
    conn: Connection
    since: float


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
        self.max_idle = max_idle
        self.idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._idle: dict[asyncio.AbstractEventLoop, dict[str, list[_Idle]]] = {}

    async def run(self, call: base.ToolCall) -> base.ToolResult:
        progress = _Progress()
        try:
            script = call.config.get("query", call.config.get("command"))
            if not isinstance(script, str):
                raise ToolInvalid("postgres tool needs `command` or `query` (a string)")
            statements = sql.split_statements(script)
            if not statements:
                raise ToolInvalid("postgres script holds no statement")
            params = connection_params(call.config, self.credentials)
            progress.redactor = _redactor(params, call.config)
            chunks = bind_params(statements, call.config.get("params"))
            schema = _search_path(call.config.get("schema"))
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

    # -- internals ----------------------------------------------------------------------

    async def _run(
        self,
        params: dict[str, Any],
        chunks: list[tuple[str, Any]],
        schema: list[str] | None,
        progress: _Progress,
    ) -> dict[str, Any]:
        key = _dsn_key(params)
        conn = self._checkout(key)
        reused = conn is not None
        if conn is None:
            conn = await _connect(params)
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
                conn = await _connect(params)
                progress.connected = True
                data = await _execute(conn, chunks, schema, progress)
        except BaseException:
            await conn.close()
            raise
        await self._release(key, conn)
        return data

    def _checkout(self, key: str) -> Connection | None:
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

    async def _release(self, key: str, conn: Connection) -> None:
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


async def _connect(params: dict[str, Any]) -> Connection:
    return await psycopg.AsyncConnection.connect(
        autocommit=True, prepare_threshold=None, context=_ADAPTERS, **params
    )


async def _execute(
    conn: Connection,
    chunks: list[tuple[str, Any]],
    schema: list[str] | None,
    progress: _Progress,
) -> dict[str, Any]:
    """Run the statements; one transaction unless the script needs autocommit."""
    async with conn.cursor() as cur:
        if _needs_autocommit([text for text, _ in chunks]):
            try:
                if schema:
                    await cur.execute(_set_search_path(schema, local=False))
                return await _statements(cur, chunks, progress)
            finally:
                if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                    with contextlib.suppress(psycopg.Error):
                        await conn.rollback()  # a BEGIN without COMMIT, or a failed block
        async with conn.transaction():
            if schema:
                await cur.execute(_set_search_path(schema, local=True))
            return await _statements(cur, chunks, progress)


async def _statements(
    cur: psycopg.AsyncCursor[tuple[Any, ...]],
    chunks: list[tuple[str, Any]],
    progress: _Progress,
) -> dict[str, Any]:
    for index, (text, values) in enumerate(chunks, start=1):
        progress.statement = index
        if values is None:
            await cur.execute(text)
        else:
            await cur.execute(text, values)
    return await _last_result(cur)


async def _last_result(cur: psycopg.AsyncCursor[tuple[Any, ...]]) -> dict[str, Any]:
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


# -- connection parameters ---------------------------------------------------------------


def connection_params(
    config: Mapping[str, Any], credentials: base.CredentialLookup | None
) -> dict[str, Any]:
    """libpq parameters from `auth` (a credential name) and/or `connection_string`."""
    params: dict[str, Any] = {}
    dsn = config.get("connection_string")
    if dsn is not None and dsn != "":
        if not isinstance(dsn, str):
            raise ToolInvalid("postgres `connection_string` must be a string")
        params.update(_parse_dsn(dsn, "connection_string"))
    auth = config.get("auth")
    if auth is not None and auth != "":
        params.update(_credential_params(_credential_name(auth), credentials))
    elif not params:
        raise ToolInvalid(
            "postgres tool needs `auth` (a registered credential) or `connection_string`"
        )
    params.setdefault("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    return params


def _credential_name(auth: Any) -> str:
    name = base.auth_credential(auth)
    if name is None:
        raise ToolInvalid("postgres `auth` must name a registered credential"
                          + ("" if isinstance(auth, Mapping) else " (a string)"))  # fmt: skip
    return name


def _credential_params(name: str, credentials: base.CredentialLookup | None) -> dict[str, Any]:
    try:
        data = credentials(name) if credentials is not None else None
    except MilepostError as exc:  # e.g. credential_unreadable: the key changed
        raise ToolInvalid(f"postgres auth: {exc.message}") from None
    if data is None:
        raise ToolInvalid(f"postgres auth: credential {name!r} is not registered")
    kind = data.get("type")
    if kind is not None and str(kind).lower() not in CREDENTIAL_TYPES:
        raise ToolInvalid(f"postgres auth: credential {name!r} has type {kind!r}, not postgres")
    params: dict[str, Any] = {}
    base_dsn = data.get("connection_string", data.get("dsn"))
    if isinstance(base_dsn, str) and base_dsn:
        params.update(_parse_dsn(base_dsn, f"credential {name!r}"))
    for key, value in data.items():
        target = FIELD_ALIASES.get(key) or (key if key in PASSTHROUGH else None)
        if target is None or value is None or value == "":
            continue
        if target == "port":
            value = _port(value, name)
        elif target == "password" and not isinstance(value, str):
            value = str(value)
        params[target] = value
    return params


def _port(value: Any, name: str) -> int:
    try:
        port = int(str(value).strip())
    except ValueError:
        raise ToolInvalid(
            f"postgres auth: credential {name!r} has a port that is not a number"
        ) from None
    if not 0 < port < 65536:
        raise ToolInvalid(f"postgres auth: credential {name!r} has port {port} out of range")
    return port


def _parse_dsn(dsn: str, where: str) -> dict[str, Any]:
    try:
        return dict(conninfo_to_dict(dsn))
    except psycopg.ProgrammingError:
        # libpq's message may quote the string, password included
        raise ToolInvalid(f"postgres {where}: not a valid connection string") from None


def _dsn_key(params: Mapping[str, Any]) -> str:
    return "\x00".join(f"{k}={params[k]}" for k in sorted(params))


def _redactor(params: Mapping[str, Any], config: Mapping[str, Any]) -> Redactor:
    secrets = [str(params["password"])] if params.get("password") else []
    dsn = config.get("connection_string")
    if isinstance(dsn, str) and dsn:
        secrets.append(dsn)
    return Redactor(secrets)


# -- statements and parameters -----------------------------------------------------------


def placeholders(statement: str) -> tuple[int, set[str]]:
    """Positional placeholder count and placeholder names, as psycopg reads them."""
    count, names = 0, set()
    for match in _PLACEHOLDER.finditer(statement):
        if match.group(0) == "%%":
            continue
        if match.group(1) is None:
            count += 1
        else:
            names.add(match.group(1))
    return count, names


def bind_params(statements: list[str], params: Any) -> list[tuple[str, Any]]:
    """Each statement with the parameters it takes (None: run without parameters)."""
    if params is None or (isinstance(params, list | tuple | Mapping) and not params):
        return [(s, None) for s in statements]
    if isinstance(params, Mapping):
        values = {str(k): _adapt(v) for k, v in params.items()}
        return [(s, values if placeholders(s)[1] else None) for s in statements]
    if isinstance(params, str | bytes) or not isinstance(params, Sequence):
        params = [params]
    flat = [_adapt(v) for v in params]
    counts = [placeholders(s)[0] for s in statements]
    if sum(counts) != len(flat):
        raise ToolInvalid(
            f"postgres `params` has {len(flat)} value(s) but the statements hold "
            f"{sum(counts)} `%s` placeholder(s)"
        )
    chunks: list[tuple[str, Any]] = []
    offset = 0
    for statement, n in zip(statements, counts, strict=True):
        chunks.append((statement, flat[offset : offset + n] if n else None))
        offset += n
    return chunks


def _adapt(value: Any) -> Any:
    """Mappings (and lists holding any) go as JSON; other values as psycopg adapts them."""
    if isinstance(value, Mapping) or (
        isinstance(value, list | tuple) and any(isinstance(v, Mapping) for v in value)
    ):
        return Json(value)
    return value


def _search_path(schema: Any) -> list[str] | None:
    if schema is None or schema == "":
        return None
    names = schema.split(",") if isinstance(schema, str) else schema
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise ToolInvalid("postgres `schema` must be a name or a list of names")
    cleaned = [n.strip() for n in names if n.strip()]
    return cleaned or None


def _set_search_path(schema: list[str], *, local: bool) -> pg_sql.Composed:
    return pg_sql.SQL("SET {} search_path TO {}").format(
        pg_sql.SQL("LOCAL" if local else "SESSION"),
        pg_sql.SQL(", ").join(pg_sql.Identifier(name) for name in schema),
    )


def _needs_autocommit(statements: list[str]) -> bool:
    """True if the script manages transactions or cannot run inside a transaction block."""
    for statement in statements:
        keyword = sql.first_keyword(statement)
        if keyword in sql.TRANSACTION_KEYWORDS:
            if keyword == "ROLLBACK" and re.match(
                r"\s*ROLLBACK\s+(?:WORK\s+|TRANSACTION\s+)?TO\b",
                sql.strip_comments(statement),
                re.IGNORECASE,
            ):
                continue  # ROLLBACK TO SAVEPOINT stays inside the transaction
            return True
        if _NO_TRANSACTION.match(sql.strip_comments(statement)):
            return True
    return False


# -- value loading -----------------------------------------------------------------------


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
