"""The PostgreSQL adapter: psycopg 3, a connection pool, versioned migrations.

Same contract and same tables as the SQLite adapter (`migrations/postgres/`). Where the
two differ, it is for concurrency between processes:

- `append` numbers events per execution under `pg_advisory_xact_lock` on the execution
  (two-int key space, keys taken in sorted order so batches cannot deadlock), reads
  `max(seq)` after the lock, and inserts; the unique (execution_id, seq) index is the
  backstop. Event ids already in the log are skipped (read under the lock, then
  `ON CONFLICT (event_id) DO NOTHING` with a count check for the cross-execution race).
- `claim_next` is `UPDATE ... WHERE command_id IN (SELECT ... FOR UPDATE SKIP LOCKED)`;
  `claim` locks the one command row.
- `lock_execution` holds a session `pg_advisory_lock(execution_id)` (the single-bigint
  key space, which never overlaps the two-int one used inside transactions) on a
  connection of a separate pool, for the length of the block.

Connections are in autocommit; writes open explicit transactions. Driver errors become
`StoreError` / `StoreUnavailable` / `ConcurrencyConflict` (`raise ... from exc`).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors

from milepost.core import events as ev
from milepost.errors import ClaimRefused, ConcurrencyConflict, MilepostError
from milepost.store import migrations, port

Conn = psycopg.Connection[tuple[Any, ...]]

# namespaces of the two-int advisory key space (transaction locks only)
_NS_MIGRATE = 0x6D70_0001
_NS_APPEND = 0x6D70_0002
_NS_CATALOG = 0x6D70_0003
_NS_LEADER = 0x6D70_0004  # the one session lock in this space (see try_leader_lock)
_NS_MACHINE = 0x6D70_0005

class _Rows:
    """A statement over rows, its `{rows}` written for their number.

    A few rows: a VALUES list, one statement text per row count, small enough for psycopg
    to cache its parsing (at most `_CACHED_PARAMS` parameters) and to prepare it once it
    recurs. More: one binary array per column (`unnest`), one text for any number. A long
    VALUES list was parsed by psycopg again on every call (a quarter of the server's CPU in
    W3), and arrays in text form escape every element with a regular expression (4x the
    binary form's cost). Arrays cost more to build than a cached VALUES statement, so a W1
    step's four events keep VALUES."""

    def __init__(self, sql: str, types: Sequence[str]) -> None:
        self.values_max = max(1, _CACHED_PARAMS // len(types))
        row = "(" + ",".join(f"%s::{t}" for t in types) + ")"
        self._values = {n: sql.format(rows="(VALUES " + ",".join([row] * n) + ")").encode()
                        for n in range(1, self.values_max + 1)}  # fmt: skip
        self._unnest = sql.format(rows="unnest(" + ",".join(f"%b::{t}[]" for t in types) + ")")

    def execute(self, conn: Conn, rows: Sequence[tuple[Any, ...]]) -> psycopg.Cursor[Any]:
        """Queue the statement for `rows` (not empty; in each column, values of one Python
        type: psycopg will not dump a list of mixed types)."""
        if len(rows) <= self.values_max:
            return conn.execute(self._values[len(rows)], [v for r in rows for v in r])
        return conn.execute(self._unnest, [list(column) for column in zip(*rows, strict=True)])


_CACHED_PARAMS = 50
"""psycopg caches the parsing of a statement with at most this many parameters
(`psycopg._queries.MAX_CACHED_STATEMENT_PARAMS`)."""
_EVENT_TYPES = ("bigint", "bigint", "bigint", "bigint", "text", "text", "text", "text", "text",
                "text", "float8")  # fmt: skip
_EVENT_INSERT = _Rows(
    "INSERT INTO event (event_id, execution_id, seq, parent_event_id, event_type, step, status,"
    " result, meta, worker_id, created_at) SELECT * FROM {rows} AS v"
    " ON CONFLICT (event_id) DO NOTHING", _EVENT_TYPES)
_EVENT_INSERT_STRICT = _Rows(
    "INSERT INTO event (event_id, execution_id, seq, parent_event_id, event_type, step, status,"
    " result, meta, worker_id, created_at) SELECT * FROM {rows} AS v", _EVENT_TYPES)
"""The vouched path's insert: an id in the log anyway fails the transaction (the careful
retry then tells a repeat of the same event from a conflict), never drops the event."""
_COMMAND_INSERT = _Rows(
    "INSERT INTO command (command_id, execution_id, step, run, idx, attempt, idempotency_key,"
    " status, pool, created_at, updated_at) SELECT * FROM {rows} AS v",
    ("bigint", "bigint", "text", "int", "int", "int", "text", "text", "text", "float8",
     "float8"))  # fmt: skip
_COMMAND_SETTLE = _Rows(
    "UPDATE command SET status=v.status, updated_at=v.at FROM {rows} AS v(status, at, id)"
    " WHERE command.command_id = v.id", ("text", "float8", "bigint"))
_CLAIM_MOVED = "MP409"
"""The SQLSTATE of `milepost_check_claims` when a reported claim is no longer live."""


_EVENT_COLS = ("seq, event_id, execution_id, parent_event_id, event_type, step, status, result,"
               " meta, worker_id, created_at")  # fmt: skip
_EXEC_COLS = ("execution_id, path, version, status, created_at, updated_at,"
              " parent_execution_id, error, cancel_requested")  # fmt: skip
_CMD_COLS = ("command_id, execution_id, step, run, idx, attempt, idempotency_key, status,"
             " worker_id, epoch, lease_expires_at, created_at")  # fmt: skip
_REDRIVE = (
    "SELECT x.execution_id FROM execution x WHERE x.status='RUNNING'"
    " AND NOT EXISTS (SELECT 1 FROM command c WHERE c.execution_id = x.execution_id"
    " AND c.status IN (%s, %s))"
    " AND COALESCE((SELECT e.created_at FROM event e WHERE e.execution_id = x.execution_id"
    " ORDER BY e.seq DESC LIMIT 1), x.updated_at) < %s"
    " ORDER BY x.execution_id"
)


class _EventIdRace(Exception):
    """An event id arrived from another transaction between our check and our insert."""


def mask_url(url: str) -> str:
    """The URL with its password replaced by `***` (URLs and `key=value` strings)."""
    if "://" not in url:
        return re.sub(r"(password\s*=\s*)(\S+)", r"\1***", url)
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


@contextlib.contextmanager
def _driver_errors(url: str) -> Iterator[None]:
    """Turn psycopg errors into milepost errors, keeping the constraint and SQLSTATE."""
    try:
        yield
    except psycopg_pool.PoolTimeout as exc:
        raise port.StoreUnavailable(f"no connection to {url} in time: {exc}", url=url) from exc
    except (pg_errors.UniqueViolation, pg_errors.DeadlockDetected,
            pg_errors.SerializationFailure) as exc:  # fmt: skip
        raise ConcurrencyConflict(
            f"{exc.diag.message_primary or exc}", constraint=exc.diag.constraint_name,
            sqlstate=exc.sqlstate) from exc  # fmt: skip
    except psycopg.OperationalError as exc:
        raise port.StoreUnavailable(f"database {url}: {exc}", url=url,
                                    sqlstate=exc.sqlstate) from exc  # fmt: skip
    except psycopg.Error as exc:
        if exc.sqlstate == _CLAIM_MOVED:  # raised by milepost_check_claims (migration 3)
            raise port.ClaimMoved(exc.diag.message_primary or "a reported claim moved",
                                  sqlstate=exc.sqlstate) from exc  # fmt: skip
        raise port.StoreError(f"database {url}: {exc}", url=url, sqlstate=exc.sqlstate) from exc


def _fold(execution_id: int) -> int:
    """A 64-bit id folded into the signed 32-bit second key of a two-int advisory lock.
    Two executions that fold alike only wait for each other's appends."""
    v = (execution_id ^ (execution_id >> 32)) & 0xFFFFFFFF
    return v - (1 << 32) if v >= (1 << 31) else v


def _unlock_all(conn: Conn) -> None:
    # a lock connection goes back to the pool holding nothing, whatever happened
    conn.execute("SELECT pg_advisory_unlock_all()")


class PostgresStore:
    """Implements `port.Store` on one PostgreSQL database."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10,
                 connect_timeout: float = 10.0, migrate: bool = True) -> None:  # fmt: skip
        self.url = url
        self.masked_url = mask_url(url)
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        self._pool = self._open_pool(min_size, max_size, name="milepost")
        self._lock_pool: psycopg_pool.ConnectionPool[Conn] | None = None
        self._leader: Conn | None = None
        self._mutex = threading.Lock()
        self._held = threading.local()
        """The calling thread's lock connection while it is inside `lock_execution`."""
        if migrate:
            try:
                self.migrate()
            except BaseException:
                self.close()
                raise

    # -- plumbing --------------------------------------------------------------------------

    def _open_pool(self, min_size: int, max_size: int, *, name: str,
                   reset: Any = None) -> psycopg_pool.ConnectionPool[Conn]:  # fmt: skip
        pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            self.url, min_size=min_size, max_size=max_size, open=False, name=name,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(self._connect_timeout))},
            # no `check` on every borrow (a round trip per query): a connection that broke
            # (database restarted) fails its one call, which callers see as StoreUnavailable
            # and retry, and the pool drops it when it comes back
            reset=reset,
            timeout=max(self._connect_timeout, 30.0),
        )  # fmt: skip
        try:
            with _driver_errors(self.masked_url):
                pool.open(wait=min_size > 0, timeout=self._connect_timeout)
        except BaseException:
            pool.close()
            raise
        return pool

    @contextlib.contextmanager
    def _conn(self) -> Iterator[Conn]:
        with _driver_errors(self.masked_url), self._pool.connection() as conn:
            yield conn

    @contextlib.contextmanager
    def _txn(self) -> Iterator[Conn]:
        with self._conn() as conn, conn.transaction():
            yield conn

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._conn() as conn:
            return conn.execute(sql, params).fetchall()

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Test hook shared with the SQLite adapter: `?` placeholders are accepted (and
        translated) as long as the statement has no `%s` of its own."""
        if params and "%s" not in sql:
            sql = sql.replace("%", "%%").replace("?", "%s")
        with self._conn() as conn:
            cur = conn.execute(sql, params or None)
            return cur.fetchall() if cur.description else []

    def close(self) -> None:
        self._pool.close()
        with self._mutex:
            if self._lock_pool is not None:
                self._lock_pool.close()
            if self._leader is not None:
                self._leader.close()
                self._leader = None

    def migrate(self) -> int:
        scripts = migrations.scripts("postgres")
        with self._txn() as conn:
            # one migrator at a time; DDL is transactional here, so all or nothing
            conn.execute("SELECT pg_advisory_xact_lock(%s::int4, 0)", (_NS_MIGRATE,))
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
            current = int(row[0] or 0) if row else 0
            for migration in scripts:
                if migration.version > current:
                    conn.execute(migration.sql.encode())  # no parameters: several statements
                    conn.execute("INSERT INTO schema_version VALUES (%s)", (migration.version,))
        return len(scripts)

    def schema_version(self) -> int:
        rows = self._rows("SELECT to_regclass('schema_version') IS NOT NULL")
        if not rows[0][0]:
            return 0
        return int(self._rows("SELECT max(version) FROM schema_version")[0][0] or 0)

    # -- events ----------------------------------------------------------------------------

    def append(self, events: Sequence[ev.Event], *, expect: Mapping[int, int] | None = None,
               check_claims: bool = False) -> list[ev.Event]:  # fmt: skip
        return self.append_and_claim(events, None, expect=expect, check_claims=check_claims)[0]

    def append_and_claim(self, events: Sequence[ev.Event], claim: port.ClaimRequest | None, *,
                         expect: Mapping[int, int] | None = None, check_claims: bool = False,
                         ) -> tuple[list[ev.Event], port.Claimed]:  # fmt: skip
        if not events and claim is None:
            return [], []
        # first try: nothing read before writing; a repeated event id shows in the insert's
        # count, and the retry reads the known ids first. With `expect` covering every
        # execution written to, the caller has folded those logs up to now and left out the
        # events they already hold, so no count needs checking: the commit goes out in the
        # same round trip as everything else.
        xids = {e.execution_id for e in events}
        trusted = expect is not None and xids <= expect.keys()
        claims = port.claims_reported(events) if check_claims else {}
        check_known = False
        for _ in range(3):
            try:
                careful = not trusted or check_known
                with self._conn() as conn:
                    # A pipeline's Sync ends the implicit transaction of everything sent
                    # before it (an autocommit connection sends no BEGIN): the trusted
                    # path, which reads nothing before the end, needs no BEGIN and COMMIT
                    # statements of its own. The careful one syncs to check, so it does.
                    txn = conn.transaction() if careful else contextlib.nullcontext()
                    with conn.pipeline() as pipe, txn:
                        if claims:  # first: it holds the command rows until the commit
                            conn.execute("SELECT milepost_check_claims(%s::bigint[],"
                                         " %s::bigint[])", (list(claims), list(claims.values())))  # fmt: skip
                        stored, check = self._append_txn(conn, events, expect, check_known)
                        collect = self._queue_claim(conn, claim) if claim is not None else None
                        if careful:
                            pipe.sync()
                            check()  # before the commit
                    return stored, collect() if collect is not None else []
            except _EventIdRace:
                check_known = True  # rolled back; the other writer's rows are visible now
            except (port.ClaimMoved, port.EventIdConflict):
                raise
            except ConcurrencyConflict as exc:
                if expect and exc.fields.get("constraint") == "event_execution_seq":
                    # a seq taken from `expect` was taken by another writer in between
                    raise port.LogMoved("another writer appended to these executions first",
                                        execution_ids=sorted({str(e.execution_id)
                                                              for e in events})) from exc  # fmt: skip
                if check_known:
                    raise
                # a repeated event's projection (its command row, say) is already there:
                # do it again the careful way, leaving out the events the log has
                check_known = True
        raise ConcurrencyConflict("could not append: the log kept moving",
                                  execution_ids=sorted({e.execution_id for e in events}))

    def _append_txn(self, conn: Conn, events: Sequence[ev.Event], expect: Mapping[int, int] | None,
                    check_known: bool) -> tuple[list[ev.Event], Callable[[], None]]:  # fmt: skip
        """Queue the writes; returns the events stored and a check to call before the
        commit (it raises _EventIdRace if an event id was already in the log)."""
        if not events:
            return [], lambda: None
        xids = sorted({e.execution_id for e in events})
        # `expect` names the last seq the caller saw: no need to read it (the unique
        # (execution_id, seq) index refuses the insert if another writer took it)
        last = {x: expect[x] for x in xids if expect and x in expect}
        unknown = [x for x in xids if x not in last]
        if unknown:
            # numbering from max(seq): hold off other appenders to these executions first
            for key in sorted({_fold(x) for x in unknown}):
                conn.execute("SELECT pg_advisory_xact_lock(%s::int4, %s::int4)",
                             (_NS_APPEND, key))  # fmt: skip
            last.update(conn.execute(
                "SELECT execution_id, max(seq) FROM event WHERE execution_id = ANY(%s::bigint[])"
                " GROUP BY execution_id", (unknown,)).fetchall())  # fmt: skip
        known: dict[int, ev.Event] = {}
        if check_known:
            known = {int(r[1]): self._decode(r) for r in conn.execute(
                f"SELECT {_EVENT_COLS} FROM event WHERE event_id = ANY(%s::bigint[])",
                ([e.event_id for e in events],))}  # fmt: skip
        # a repeat (of the log's event or of one earlier in the batch) of the same event is
        # left out, of another event refused: all or nothing
        events = port.new_events(events, known)
        stored: list[ev.Event] = []
        rows: list[tuple[Any, ...]] = []
        for event in events:
            seq = last[event.execution_id] = last.get(event.execution_id, 0) + 1
            stored.append(_with_seq(event, seq))
            rows.append((event.event_id, event.execution_id, seq, event.parent_event_id,
                         event.event_type, event.step, event.status,
                         self._encode_result_txn(conn, event),
                         json.dumps(event.meta) if event.meta else None, event.worker_id,
                         float(event.created_at)))  # fmt: skip
        if not stored:
            return [], lambda: None
        vouched = expect is not None and set(xids) <= expect.keys() and not check_known
        inserted = (_EVENT_INSERT_STRICT if vouched else _EVENT_INSERT).execute(conn, rows)
        self._project_txn(conn, stored)

        def check() -> None:
            if inserted.rowcount != len(stored):
                raise _EventIdRace()

        return stored, check

    def _encode_result_txn(self, conn: Conn, event: ev.Event) -> str:
        envelope = event.envelope_result()
        text = json.dumps(envelope, default=str)
        if len(text) <= port.BLOB_THRESHOLD:
            return text
        # large payloads live in the result store; the event keeps a reference that names
        # the execution, so a sharded store finds the database that holds it
        data = json.dumps(event.payload, default=str).encode()
        # the event's id is the blob's: no RETURNING to wait for, which in a pipeline would
        # send a Sync and so end the implicit transaction of `append_and_claim` early
        conn.execute(
            "INSERT INTO result_blob (blob_id, execution_id, data, created_at)"
            " VALUES (%s,%s,%s,%s)", (event.event_id, event.execution_id, data, event.created_at))  # fmt: skip
        ref = {"uri": f"{port.BLOB_PREFIX}{event.execution_id}/{event.event_id}",
               "size": len(data)}  # fmt: skip
        return json.dumps({"status": envelope["status"], "reference": ref})

    def _project_txn(self, conn: Conn, events: list[ev.Event]) -> None:
        """The projections of stored events, in the same order of writes as SQLite's.
        A stale report (`meta.stale`, fenced by the server) changes none of them."""
        issued, settled, expired = [], [], []
        terminal: list[ev.Event] = []
        for event in events:
            if event.meta.get("stale"):
                continue
            p = event.payload
            t = event.event_type
            if t == ev.COMMAND_ISSUED:
                issued.append((int(p["command_id"]), event.execution_id, event.step,
                               int(p["run"]), int(p.get("index", -1)), int(p.get("attempt", 1)),
                               str(p.get("idempotency_key", "")), port.COMMAND_QUEUED,
                               str(p.get("pool") or "default"), float(event.created_at),
                               float(event.created_at)))  # fmt: skip
            elif t in ev.SETTLING_REPORTS:
                status = (port.COMMAND_COMPLETED if t == ev.COMMAND_COMPLETED
                          else port.COMMAND_FAILED)  # fmt: skip
                settled.append((status, float(event.created_at), int(p["command_id"])))
            elif t == ev.COMMAND_LEASE_EXPIRED:
                # the attempt is lost; only the claim that lapsed (its epoch), not a newer one
                epoch = p.get("epoch", event.meta.get("epoch"))
                expired.append((port.COMMAND_FAILED, event.created_at, p["command_id"],
                                port.COMMAND_CLAIMED, epoch, epoch))  # fmt: skip
            elif t == ev.EXECUTION_STARTED:
                conn.execute(
                    "INSERT INTO execution (execution_id, path, version, status,"
                    " parent_execution_id, created_at, updated_at) VALUES (%s,%s,%s,%s,%s,%s,%s)"
                    " ON CONFLICT (execution_id) DO NOTHING",
                    (event.execution_id, p.get("path", ""), p.get("version"), "RUNNING",
                     p.get("parent_execution_id"), event.created_at, event.created_at),
                )  # fmt: skip
            elif t == ev.EXECUTION_CANCEL_REQUESTED:
                conn.execute("UPDATE execution SET cancel_requested=true WHERE execution_id=%s",
                             (event.execution_id,))  # fmt: skip
            elif t in ev.TERMINAL_EXECUTION_EVENTS:
                terminal.append(event)  # after the command rows of the same batch exist
        if issued:
            _COMMAND_INSERT.execute(conn, issued)
        if settled:
            _COMMAND_SETTLE.execute(conn, settled)
        with conn.cursor() as cur:
            if expired:
                cur.executemany("UPDATE command SET status=%s, updated_at=%s WHERE command_id=%s"
                                " AND status=%s AND (%s::int IS NULL OR epoch=%s)", expired)  # fmt: skip
        for event in terminal:
            self._project_terminal_txn(conn, event)

    def _project_terminal_txn(self, conn: Conn, event: ev.Event) -> None:
        status = {ev.EXECUTION_COMPLETED: "COMPLETED", ev.EXECUTION_FAILED: "FAILED",
                  ev.EXECUTION_CANCELLED: "CANCELLED"}[event.event_type]  # fmt: skip
        error = event.payload.get("error")
        conn.execute(
            "UPDATE execution SET status=%s, error=%s, updated_at=%s WHERE execution_id=%s",
            (status, json.dumps(error) if error else None, event.created_at, event.execution_id),
        )
        # whatever was still queued or claimed will never run now
        conn.execute(
            "UPDATE command SET status=%s, updated_at=%s WHERE execution_id=%s"
            " AND status IN (%s, %s)",
            (port.COMMAND_CANCELLED, event.created_at, event.execution_id, port.COMMAND_QUEUED,
             port.COMMAND_CLAIMED),
        )  # fmt: skip

    def load(self, execution_id: int, after_seq: int = 0) -> list[ev.Event]:
        rows = self._rows(f"SELECT {_EVENT_COLS} FROM event WHERE execution_id=%s AND seq>%s"
                          " ORDER BY seq", (execution_id, after_seq))  # fmt: skip
        return [self._decode(row) for row in rows]

    def _decode(self, row: tuple[Any, ...]) -> ev.Event:
        seq, event_id, execution_id, parent, etype, step, status, result, meta, worker, at = row
        envelope = json.loads(result) if result else {}
        if "reference" in envelope:
            payload = json.loads(self.get_blob(envelope["reference"]["uri"]))
        else:
            payload = envelope.get("context") or {}
        return ev.Event(
            event_id=event_id, execution_id=execution_id, event_type=etype, created_at=at,
            step=step, status=status, payload=payload, meta=json.loads(meta) if meta else {},
            parent_event_id=parent, worker_id=worker, seq=seq,
        )  # fmt: skip

    def event_count(self, execution_id: int) -> int:
        return int(self._rows("SELECT count(*) FROM event WHERE execution_id=%s",
                              (execution_id,))[0][0])  # fmt: skip

    # -- executions ------------------------------------------------------------------------

    @staticmethod
    def _execution(row: tuple[Any, ...]) -> port.ExecutionRow:
        xid, path, version, status, created, updated, parent, error, cancel = row
        return port.ExecutionRow(xid, path, version, status, created, updated, parent,
                                 json.loads(error) if error else None, bool(cancel))  # fmt: skip

    def get_execution(self, execution_id: int) -> port.ExecutionRow | None:
        rows = self._rows(f"SELECT {_EXEC_COLS} FROM execution WHERE execution_id=%s",
                          (execution_id,))  # fmt: skip
        return self._execution(rows[0]) if rows else None

    def list_executions(self, *, status: str | None = None, path: str | None = None,
                        limit: int = 100, offset: int = 0) -> list[port.ExecutionRow]:  # fmt: skip
        where, params = [], []
        if status:
            where.append("status=%s")
            params.append(status.upper())
        if path:
            where.append("path=%s")
            params.append(path)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._rows(
            f"SELECT {_EXEC_COLS} FROM execution {clause}"
            " ORDER BY created_at DESC, execution_id DESC LIMIT %s OFFSET %s",
            (*params, limit, offset),
        )
        return [self._execution(r) for r in rows]

    # -- commands --------------------------------------------------------------------------

    def get_commands(self, command_ids: Sequence[int]) -> dict[int, port.CommandRow]:
        if not command_ids:
            return {}
        rows = self._rows(f"SELECT {_CMD_COLS} FROM command WHERE command_id = ANY(%s::bigint[])",
                          (list(command_ids),))  # fmt: skip
        return {int(r[0]): port.CommandRow(*r) for r in rows}

    def get_command(self, command_id: int) -> port.CommandRow | None:
        rows = self._rows(f"SELECT {_CMD_COLS} FROM command WHERE command_id=%s", (command_id,))
        return port.CommandRow(*rows[0]) if rows else None

    def open_commands(self, execution_id: int | None = None) -> list[port.CommandRow]:
        sql = f"SELECT {_CMD_COLS} FROM command WHERE status IN (%s, %s)"
        params: list[Any] = [port.COMMAND_QUEUED, port.COMMAND_CLAIMED]
        if execution_id is not None:
            sql += " AND execution_id=%s"
            params.append(execution_id)
        return [port.CommandRow(*r) for r in self._rows(sql + " ORDER BY command_id", params)]

    def claim(self, command_id: int, worker_id: str, now: float, lease_s: float) -> port.Lease:
        with self._txn() as conn:
            row = conn.execute(
                "SELECT c.status, c.worker_id, c.epoch, c.lease_expires_at, x.status,"
                " x.cancel_requested FROM command c LEFT JOIN execution x"
                " ON x.execution_id = c.execution_id WHERE c.command_id=%s FOR UPDATE OF c",
                (command_id,),
            ).fetchone()
            if row is None:
                raise MilepostError(f"unknown command {command_id}", command_id=str(command_id))
            execution = None if row[4] is None else (row[4], bool(row[5]))
            epoch_now = port.claim_epoch(command_id, worker_id, now, row[:4], execution)
            conn.execute(
                "UPDATE command SET status=%s, worker_id=%s, epoch=%s, lease_expires_at=%s,"
                " updated_at=%s WHERE command_id=%s",
                (port.COMMAND_CLAIMED, worker_id, epoch_now, now + lease_s, now, command_id),
            )
        return port.Lease(command_id, worker_id, epoch_now, now + lease_s)

    def heartbeat(self, command_id: int, worker_id: str, epoch: int, now: float,
                  lease_s: float) -> port.Lease:  # fmt: skip
        with self._txn() as conn:
            cur = conn.execute(
                "UPDATE command SET lease_expires_at=%s, updated_at=%s WHERE command_id=%s"
                " AND status=%s AND worker_id=%s AND epoch=%s",
                (now + lease_s, now, command_id, port.COMMAND_CLAIMED, worker_id, epoch),
            )
            if cur.rowcount == 0:
                raise ClaimRefused("no live claim with that epoch", reason="stale_epoch",
                                   command_id=str(command_id))  # fmt: skip
        return port.Lease(command_id, worker_id, epoch, now + lease_s)

    def expired_claims(self, now: float) -> list[port.CommandRow]:
        rows = self._rows(
            f"SELECT {_CMD_COLS} FROM command WHERE status=%s AND lease_expires_at<%s"
            " ORDER BY command_id", (port.COMMAND_CLAIMED, now))  # fmt: skip
        return [port.CommandRow(*r) for r in rows]

    def claim_next(self, worker_id: str, now: float, lease_s: float, limit: int = 1,
                   pool: str | None = None) -> list[tuple[port.CommandRow, port.Lease]]:  # fmt: skip
        if limit <= 0:
            return []
        with self._txn() as conn:
            return self._queue_claim(conn, port.ClaimRequest(worker_id, now, lease_s, limit,
                                                             pool))()  # fmt: skip

    def _queue_claim(self, conn: Conn, req: port.ClaimRequest) -> Callable[[], port.Claimed]:
        """Queue the claim; the returned call reads what it claimed (after a pipeline's
        commit too: the rows stay on the cursor)."""
        if req.limit <= 0:
            return lambda: []
        if req.executions is not None and not req.executions:
            return lambda: []
        pool_clause = "" if req.pool is None else " AND c.pool=%s"
        if req.executions is not None:
            pool_clause += " AND c.execution_id = ANY(%s)"
        # SKIP LOCKED: a claimer never waits for, nor takes, a row another one is taking;
        # `OF c` locks the command rows only, not the executions they belong to
        sql = (
            "UPDATE command SET status=%s, worker_id=%s, epoch=epoch+1, lease_expires_at=%s,"
            " updated_at=%s WHERE status=%s AND command_id IN ("
            " SELECT c.command_id FROM command c JOIN execution x"
            " ON x.execution_id = c.execution_id WHERE c.status=%s AND x.status='RUNNING'"
            f" AND NOT x.cancel_requested{pool_clause}"
            " ORDER BY c.created_at, c.command_id LIMIT %s FOR UPDATE OF c SKIP LOCKED)"
            f" RETURNING {_CMD_COLS}"
        )
        expires = req.now + req.lease_s
        params: list[Any] = [port.COMMAND_CLAIMED, req.worker_id, expires, req.now,
                             port.COMMAND_QUEUED, port.COMMAND_QUEUED]  # fmt: skip
        if req.pool is not None:
            params.append(req.pool)
        if req.executions is not None:
            params.append(sorted(req.executions))
        params.append(req.limit)
        cursor = conn.execute(sql, params)

        def collect() -> port.Claimed:
            commands = sorted((port.CommandRow(*r) for r in cursor.fetchall()),
                              key=lambda c: (c.created_at, c.command_id))  # fmt: skip
            return [(c, port.Lease(c.command_id, req.worker_id, c.epoch, expires))
                    for c in commands]  # fmt: skip

        return collect

    def release(self, command_id: int, worker_id: str, epoch: int, now: float) -> bool:
        with self._txn() as conn:
            cur = conn.execute(
                "UPDATE command SET status=%s, worker_id=NULL, lease_expires_at=NULL,"
                " updated_at=%s WHERE command_id=%s AND status=%s AND worker_id=%s AND epoch=%s",
                (port.COMMAND_QUEUED, now, command_id, port.COMMAND_CLAIMED, worker_id, epoch),
            )
            if cur.rowcount == 0:
                raise ClaimRefused("no live claim with that epoch", reason="stale_epoch",
                                   command_id=str(command_id))  # fmt: skip
        return True

    def executions_to_redrive(self, now: float, idle_s: float = 5.0) -> list[int]:
        rows = self._rows(_REDRIVE, (port.COMMAND_QUEUED, port.COMMAND_CLAIMED, now - idle_s))
        return [int(r[0]) for r in rows]

    # -- the orchestrator lock -------------------------------------------------------------

    @contextlib.contextmanager
    def lock_execution(self, execution_id: int) -> Iterator[None]:
        """A session advisory lock on `execution_id`, held on a dedicated connection for the
        block. Reentrant within a thread: nested locks of one thread share its connection
        (session locks stack), so N nested executions cost one connection, not N. If the
        connection dies, PostgreSQL releases the lock with the session."""
        conn: Conn | None = getattr(self._held, "conn", None)
        outer = conn is None
        if conn is None:
            with _driver_errors(self.masked_url):
                conn = self._locks_pool().getconn()
            self._held.conn = conn
        try:
            with _driver_errors(self.masked_url):
                conn.execute("SELECT pg_advisory_lock(%s::int8)", (execution_id,))
            try:
                yield
            finally:
                try:
                    conn.execute("SELECT pg_advisory_unlock(%s::int8)", (execution_id,))
                except psycopg.Error:
                    conn.close()  # ending the session releases the lock
        finally:
            if outer:
                self._held.conn = None
                self._locks_pool().putconn(conn)

    def lease_machine_id(self, holder: str, now: float, ttl: float) -> int:
        with self._txn() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s::int4, 0)", (_NS_MACHINE,))
            live = {int(r[0]) for r in conn.execute(
                "SELECT machine_id FROM machine_lease WHERE expires_at > %s", (now,))}  # fmt: skip
            machine_id = port.free_machine_id(live)
            conn.execute(
                "INSERT INTO machine_lease (machine_id, holder, expires_at) VALUES (%s,%s,%s)"
                " ON CONFLICT (machine_id) DO UPDATE SET holder=excluded.holder,"
                " expires_at=excluded.expires_at", (machine_id, holder, now + ttl))  # fmt: skip
        return machine_id

    def renew_machine_id(self, machine_id: int, holder: str, now: float, ttl: float) -> bool:
        with self._conn() as conn:
            return conn.execute("UPDATE machine_lease SET expires_at=%s WHERE machine_id=%s"
                                " AND holder=%s", (now + ttl, machine_id, holder)).rowcount > 0  # fmt: skip

    def release_machine_id(self, machine_id: int, holder: str) -> bool:
        with self._conn() as conn:
            return conn.execute("DELETE FROM machine_lease WHERE machine_id=%s AND holder=%s",
                                (machine_id, holder)).rowcount > 0  # fmt: skip

    def try_leader_lock(self) -> bool:
        """True while this store holds the leader lock (one per database, e.g. for the
        reconciler): a session `pg_try_advisory_lock` on a connection kept until `close`.
        Never waits; if that connection dies the lock is gone and the next call tries again."""
        with self._mutex:
            conn = self._leader
            if conn is not None and not conn.closed:
                try:
                    conn.execute("SELECT 1")
                    return True
                except psycopg.Error:
                    conn.close()  # the session, and the lock with it, are gone
            self._leader = None
            try:
                conn = psycopg.connect(self.url, autocommit=True,
                                       connect_timeout=max(1, int(self._connect_timeout)))  # fmt: skip
            except psycopg.Error:
                return False  # cannot reach the database: certainly not the leader
            row = conn.execute("SELECT pg_try_advisory_lock(%s::int4, 0)", (_NS_LEADER,)).fetchone()
            if row is None or not row[0]:
                conn.close()
                return False
            self._leader = conn
            return True

    def _locks_pool(self) -> psycopg_pool.ConnectionPool[Conn]:
        with self._mutex:
            if self._lock_pool is None:
                self._lock_pool = self._open_pool(0, max(self._max_size, 16), name="milepost-locks",
                                                  reset=_unlock_all)  # fmt: skip
            return self._lock_pool

    # -- snapshots -------------------------------------------------------------------------

    def save_snapshot(self, execution_id: int, seq: int, data: bytes) -> None:
        with self._txn() as conn:
            conn.execute(
                "INSERT INTO snapshot (execution_id, seq, data) VALUES (%s,%s,%s)"
                " ON CONFLICT (execution_id) DO UPDATE SET seq=EXCLUDED.seq, data=EXCLUDED.data"
                " WHERE EXCLUDED.seq > snapshot.seq",
                (execution_id, seq, data),
            )

    def load_snapshot(self, execution_id: int) -> tuple[int, bytes] | None:
        rows = self._rows("SELECT seq, data FROM snapshot WHERE execution_id=%s", (execution_id,))
        return (int(rows[0][0]), bytes(rows[0][1])) if rows else None

    # -- catalog ---------------------------------------------------------------------------

    def register_playbook(self, path: str, content: str, now: float) -> port.CatalogEntry:
        with self._txn() as conn:
            # two servers registering one path would both pick the same next version
            conn.execute("SELECT pg_advisory_xact_lock(%s::int4, hashtext(%s))",
                         (_NS_CATALOG, path))  # fmt: skip
            row = conn.execute(
                "SELECT version, content, created_at FROM catalog WHERE path=%s"
                " ORDER BY version DESC LIMIT 1", (path,)).fetchone()  # fmt: skip
            if row is not None and row[1] == content:
                return port.CatalogEntry(path, int(row[0]), content, float(row[2]))
            version = (int(row[0]) if row else 0) + 1
            conn.execute("INSERT INTO catalog (path, version, content, created_at)"
                         " VALUES (%s,%s,%s,%s)", (path, version, content, now))  # fmt: skip
        return port.CatalogEntry(path, version, content, now)

    def get_playbook(self, path: str, version: int | None = None) -> port.CatalogEntry | None:
        if version is None:
            rows = self._rows("SELECT path, version, content, created_at FROM catalog"
                              " WHERE path=%s ORDER BY version DESC LIMIT 1", (path,))  # fmt: skip
        else:
            rows = self._rows("SELECT path, version, content, created_at FROM catalog"
                              " WHERE path=%s AND version=%s", (path, version))  # fmt: skip
        return port.CatalogEntry(*rows[0]) if rows else None

    def list_playbooks(self) -> list[port.CatalogEntry]:
        rows = self._rows("SELECT path, version, content, created_at FROM catalog"
                          " ORDER BY path, version")  # fmt: skip
        return [port.CatalogEntry(*r) for r in rows]

    # -- result store ----------------------------------------------------------------------

    def put_blob(self, execution_id: int, data: bytes, now: float) -> str:
        with self._txn() as conn:
            row = conn.execute(
                "INSERT INTO result_blob (execution_id, data, created_at) VALUES (%s,%s,%s)"
                " RETURNING blob_id", (execution_id, data, now)).fetchone()  # fmt: skip
        assert row is not None
        return f"{port.BLOB_PREFIX}{execution_id}/{row[0]}"

    def get_blob(self, uri: str) -> bytes:
        xid, blob_id = port.parse_blob_uri(uri)
        rows = self._rows("SELECT data, execution_id FROM result_blob WHERE blob_id=%s",
                          (blob_id,))  # fmt: skip
        if not rows or (xid is not None and rows[0][1] != xid):
            raise MilepostError(f"unknown result reference {uri!r}", uri=uri)
        return bytes(rows[0][0])

    # -- credentials and tokens ------------------------------------------------------------

    def put_credential(self, name: str, type: str, ciphertext: bytes,
                       now: float) -> port.CredentialRow:  # fmt: skip
        with self._txn() as conn:
            row = conn.execute(
                "INSERT INTO credential (name, type, ciphertext, created_at, updated_at)"
                " VALUES (%s,%s,%s,%s,%s) ON CONFLICT (name) DO UPDATE SET type=EXCLUDED.type,"
                " ciphertext=EXCLUDED.ciphertext, updated_at=EXCLUDED.updated_at"
                " RETURNING created_at", (name, type, ciphertext, now, now)).fetchone()  # fmt: skip
        assert row is not None
        return port.CredentialRow(name, type, bytes(ciphertext), float(row[0]), now)

    def get_credential(self, name: str) -> port.CredentialRow | None:
        rows = self._rows("SELECT name, type, ciphertext, created_at, updated_at"
                          " FROM credential WHERE name=%s", (name,))  # fmt: skip
        if not rows:
            return None
        name_, type_, data, created, updated = rows[0]
        return port.CredentialRow(name_, type_, bytes(data), created, updated)

    def list_credentials(self) -> list[port.CredentialRow]:
        rows = self._rows("SELECT name, type, NULL, created_at, updated_at FROM credential"
                          " ORDER BY name")  # fmt: skip
        return [port.CredentialRow(*r) for r in rows]

    def delete_credential(self, name: str) -> bool:
        with self._txn() as conn:
            return conn.execute("DELETE FROM credential WHERE name=%s", (name,)).rowcount > 0

    def create_token(self, token_hash: str, role: str, name: str | None,
                     now: float) -> port.TokenRow:  # fmt: skip
        with self._txn() as conn:
            row = conn.execute(
                "INSERT INTO token (token_hash, role, name, created_at) VALUES (%s,%s,%s,%s)"
                " ON CONFLICT (token_hash) DO NOTHING RETURNING token_hash",
                (token_hash, role, name, now)).fetchone()  # fmt: skip
        if row is None:
            raise ConcurrencyConflict("a token with that hash exists", constraint="token_pkey")
        return port.TokenRow(token_hash, role, name, now)

    def get_token(self, token_hash: str) -> port.TokenRow | None:
        rows = self._rows("SELECT token_hash, role, name, created_at FROM token"
                          " WHERE token_hash=%s", (token_hash,))  # fmt: skip
        return port.TokenRow(*rows[0]) if rows else None


    # -- the driver of an embedded execution -----------------------------------------------

    def acquire_driver(self, execution_id: int, holder: str, now: float, ttl: float, *,
                       replace: str | None = None) -> port.DriverLease:  # fmt: skip
        with self._txn() as conn:
            row = conn.execute(_ACQUIRE_DRIVER, {"x": execution_id, "holder": holder,
                                                 "until": now + ttl, "now": now,
                                                 "replace": replace}).fetchone()  # fmt: skip
            if row is None:
                # the upsert locked the live row without taking it: this read sees its holder
                held = conn.execute("SELECT holder, expires_at FROM execution_driver"
                                    " WHERE execution_id=%s", (execution_id,)).fetchone()  # fmt: skip
                assert held is not None
                raise port.DriverBusy(port.DriverLease(execution_id, held[0], float(held[1])))
        return port.DriverLease(execution_id, holder, float(row[0]))

    def renew_driver(self, execution_id: int, holder: str, now: float, ttl: float) -> bool:
        with self._txn() as conn:
            return conn.execute("UPDATE execution_driver SET expires_at=%s WHERE execution_id=%s"
                                " AND holder=%s", (now + ttl, execution_id, holder)).rowcount > 0  # fmt: skip

    def release_driver(self, execution_id: int, holder: str, now: float) -> bool:
        with self._txn() as conn:
            return conn.execute("UPDATE execution_driver SET expires_at=least(expires_at, %s)"
                                " WHERE execution_id=%s AND holder=%s",
                                (now, execution_id, holder)).rowcount > 0  # fmt: skip

    def get_driver(self, execution_id: int) -> port.DriverLease | None:
        rows = self._rows("SELECT holder, expires_at FROM execution_driver WHERE"
                          " execution_id=%s", (execution_id,))  # fmt: skip
        return port.DriverLease(execution_id, rows[0][0], float(rows[0][1])) if rows else None


_ACQUIRE_DRIVER = (
    "INSERT INTO execution_driver (execution_id, holder, expires_at)"
    " VALUES (%(x)s, %(holder)s, %(until)s)"
    " ON CONFLICT (execution_id) DO UPDATE SET holder=EXCLUDED.holder,"
    " expires_at=EXCLUDED.expires_at WHERE execution_driver.holder=EXCLUDED.holder"
    " OR execution_driver.expires_at<=%(now)s OR execution_driver.holder=%(replace)s"
    " RETURNING expires_at"
)

def _with_seq(event: ev.Event, seq: int) -> ev.Event:
    return ev.Event(event.event_id, event.execution_id, event.event_type, event.created_at,
                    event.step, event.status, event.payload, event.meta, event.parent_event_id,
                    event.worker_id, seq)  # fmt: skip
