"""The PostgreSQL dialect of `store.sql`: psycopg 3, a connection pool, pipelines.

Same contract and same tables as SQLite (`migrations/postgres/`); what is PostgreSQL's own
is for concurrency between processes and for round trips:

- writers of one log are serialized by `pg_advisory_xact_lock` on the execution (the
  two-int key space, keys taken in sorted order so batches cannot deadlock), taken only
  where an append reads the seq it numbers from; the unique (execution_id, seq) index is
  the backstop of the appends that trust `SeqCache`.
- an append is one pipeline with one Sync: the claim check (`milepost_check_fences`,
  migration 17), the events, their projections (batch inserts: `_Rows`) and the claim go
  out together, in the pipeline's implicit transaction when nothing is read before the
  end, else between a BEGIN and a COMMIT of their own (`_one_sync`).
- the claim is one statement (`pg_claims`): `UPDATE ... FROM (SELECT ... FOR UPDATE SKIP
  LOCKED)` with the insert of its `command.claimed` events, numbered in SQL after the
  log's end, their ids one reserved block (`ids.block_of`).
- `lock_execution` holds a session `pg_advisory_lock(execution_id)` (the single-bigint
  key space, which never overlaps the two-int one used inside transactions) on a
  connection of a separate pool, for the length of the block.

Connections are in autocommit; writes open explicit transactions. Driver errors become
`StoreError` / `StoreUnavailable` / `ConcurrencyConflict` (`raise ... from exc`).
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors

from milepost.core import events as ev
from milepost.errors import ConcurrencyConflict
from milepost.ids import block_of
from milepost.store import liveness, migrations, pg_claims, port, projection, sql

Conn = psycopg.Connection[tuple[Any, ...]]

Collect = Callable[[], tuple[port.Claimed, list[ev.Event]]]
"""What `claim_queued` took: the claims and their `command.claimed` events."""
_NS_MIGRATE = 0x6D70_0001
_NS_LEADER = 0x6D70_0004  # the one session lock in the two-int space (see try_leader_lock)


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
        self._values = {
            n: sql.format(rows="(VALUES " + ",".join([row] * n) + ")").encode()
            for n in range(1, self.values_max + 1)
        }
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
_EVENT_TYPES = (
    "bigint",
    "bigint",
    "bigint",
    "bigint",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "float8",
)
_EVENT_INSERT = _Rows(
    "INSERT INTO event (event_id, execution_id, seq, parent_event_id, event_type, step, status,"
    " result, meta, worker_id, created_at) SELECT * FROM {rows} AS v"
    " ON CONFLICT (event_id) DO NOTHING",
    _EVENT_TYPES,
)
_EVENT_INSERT_STRICT = _Rows(
    "INSERT INTO event (event_id, execution_id, seq, parent_event_id, event_type, step, status,"
    " result, meta, worker_id, created_at) SELECT * FROM {rows} AS v",
    _EVENT_TYPES,
)
"""The vouched path's insert: an id in the log anyway fails the transaction (the careful
retry then tells a repeat of the same event from a conflict), never drops the event."""
_COMMAND_INSERT = _Rows(
    "INSERT INTO command (command_id, execution_id, step, run, idx, attempt, idempotency_key,"
    " status, pool, created_at, updated_at) SELECT * FROM {rows} AS v",
    ("bigint", "bigint", "text", "int", "int", "int", "text", "text", "text", "float8", "float8"),
)
_COMMAND_SETTLE = _Rows(
    "UPDATE command SET status=v.status, updated_at=v.at FROM {rows} AS v(status, at, id)"
    " WHERE command.command_id = v.id",
    ("text", "float8", "bigint"),
)
_CLAIM_MOVED = "MP409"
"""The SQLSTATE of `milepost_check_fences` when a command row is not as its fence requires."""


_LOCK_KEYS = (
    "SELECT pg_advisory_xact_lock(%s::int4, s.k) FROM (SELECT k FROM unnest(%s::int4[])"
    " WITH ORDINALITY AS t(k, i) ORDER BY i OFFSET 0) s"
)
"""Several keys in the order given (`OFFSET 0` keeps the sort before the locks)."""


@functools.lru_cache(maxsize=512)
def _pg(text: str) -> str:
    return text.replace("?", "%s")


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
    except (
        pg_errors.UniqueViolation,
        pg_errors.DeadlockDetected,
        pg_errors.SerializationFailure,
    ) as exc:
        if exc.diag.constraint_name == "event_execution_seq":
            raise sql.SeqTaken(
                f"{exc.diag.message_primary or exc}",
                constraint="event_execution_seq",
                sqlstate=exc.sqlstate,
            ) from exc
        raise ConcurrencyConflict(
            f"{exc.diag.message_primary or exc}",
            constraint=exc.diag.constraint_name,
            sqlstate=exc.sqlstate,
        ) from exc
    except psycopg.OperationalError as exc:
        raise port.StoreUnavailable(
            f"database {url}: {exc}", url=url, sqlstate=exc.sqlstate
        ) from exc
    except psycopg.Error as exc:
        if exc.sqlstate == _CLAIM_MOVED:  # raised by milepost_check_fences (migration 17)
            raise port.ClaimMoved(
                exc.diag.message_primary or "a reported claim moved", sqlstate=exc.sqlstate
            ) from exc
        raise port.StoreError(f"database {url}: {exc}", url=url, sqlstate=exc.sqlstate) from exc


@contextlib.contextmanager
def _one_sync(conn: Conn, explicit: bool) -> Iterator[psycopg.Pipeline]:
    """A transaction in one pipeline whose only Sync is the pipeline's end (`pipe.sync()`
    adds one where the caller must read before committing).

    `explicit`: its own BEGIN and COMMIT, in the pipeline. Else the pipeline's implicit
    transaction, which its Sync commits: two statements fewer, for an append that reads
    nothing before its end (`SQLStore.reads_nothing`; a Sync in its middle would commit
    half of it). Python failing half-way would leave that Sync to commit what was sent, so
    a statement that fails is sent first: the Sync then rolls everything back.

    Not `conn.transaction()`: inside a pipeline it nests two more pipeline blocks around
    itself, and each block's end is a Sync, a wait for the server: three round trips an
    append instead of one. A failure leaves an explicit transaction open or aborted after
    the Sync: rolled back here, before the connection goes back to the pool.

    A statement the server refused makes it skip the rest of the pipeline, the Parse of a
    statement psycopg began to prepare there included (its sixth execution), which psycopg
    already counts as prepared: on that connection the statement would fail ever after
    ("prepared statement _pg3_N does not exist"). psycopg forgets its prepared statements
    at a rollback, and has the server forget them too (DEALLOCATE ALL): after any failure
    the transaction is rolled back, an implicit one (already ended) after an empty BEGIN.
    A failure in Python may hide the server's refusal behind it: it is treated the same."""
    try:
        with conn.pipeline() as pipe:
            if explicit:
                conn.execute(b"BEGIN")
            try:
                yield pipe
            except BaseException:
                if not explicit:
                    with contextlib.suppress(psycopg.Error):  # already aborted: as good
                        conn.execute(_ABANDON)
                raise
            if explicit:
                conn.execute(b"COMMIT")
    except BaseException:
        if not conn.closed:
            with contextlib.suppress(psycopg.Error):
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                    conn.execute(b"BEGIN")  # an implicit transaction: ended by its Sync
                conn.rollback()
        raise


_ABANDON = (
    b"DO $$BEGIN RAISE EXCEPTION 'milepost: an append was abandoned half-way: rolled back'; END$$"
)
"""The statement that makes a pipeline's implicit transaction fail (`_one_sync`)."""


def _unlock_all(conn: Conn) -> None:
    # a lock connection goes back to the pool holding nothing, whatever happened
    conn.execute("SELECT pg_advisory_unlock_all()")


class PostgresStore(sql.SQLStore):
    """Implements `port.Store` on one PostgreSQL database."""

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 10.0,
        migrate: bool = True,
    ) -> None:
        super().__init__()
        self.url = url
        self.masked_url = mask_url(url)
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        self._pool = self._open_pool(min_size, max_size, name="milepost")
        self._lock_pool: psycopg_pool.ConnectionPool[Conn] | None = None
        self._leader: Conn | None = None
        self._mutex = threading.Lock()
        self._claiming = 0
        """Claims alone (no append) in flight in this process (`write_batch`)."""
        self._claiming_lock = threading.Lock()
        self._held = threading.local()
        """The calling thread's lock connection while it is inside `lock_execution`."""
        if migrate:
            try:
                self.migrate()
            except BaseException:
                self.close()
                raise

    # -- the dialect's hooks ---------------------------------------------------------------

    def _open_pool(
        self, min_size: int, max_size: int, *, name: str, reset: Any = None
    ) -> psycopg_pool.ConnectionPool[Conn]:
        pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            self.url,
            min_size=min_size,
            max_size=max_size,
            open=False,
            name=name,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(self._connect_timeout))},
            # no `check` on every borrow (a round trip per query): a connection that broke
            # (database restarted) fails its one call, which callers see as StoreUnavailable
            # and retry, and the pool drops it when it comes back
            reset=reset,
            timeout=max(self._connect_timeout, 30.0),
        )
        try:
            with _driver_errors(self.masked_url):
                pool.open(wait=min_size > 0, timeout=self._connect_timeout)
        except BaseException:
            pool.close()
            raise
        return pool

    @contextlib.contextmanager
    def read(self) -> Iterator[Conn]:
        with _driver_errors(self.masked_url), self._pool.connection() as conn:
            yield conn

    @contextlib.contextmanager
    def txn(self) -> Iterator[Conn]:
        with self.read() as conn, conn.transaction():
            yield conn

    approver_entry = (
        "EXISTS (SELECT 1 FROM jsonb_array_elements_text(approvers::jsonb) AS a(v) WHERE a.v = ?)"
    )

    def sql(self, text: str) -> str:
        return _pg(text)

    def lock_keys(self, conn: Conn, namespace: int, keys: Sequence[int]) -> None:
        if len(keys) == 1:
            conn.execute("SELECT pg_advisory_xact_lock(%s::int4, %s::int4)", (namespace, keys[0]))
        elif keys:  # a batch of many runs' reports: one statement, not one a run
            conn.execute(_LOCK_KEYS, (namespace, list(keys)))

    def many(self, conn: Conn, text: str, rows: Sequence[Sequence[Any]]) -> int:
        with conn.cursor() as cur:
            cur.executemany(_pg(text), rows)
            return cur.rowcount  # the sum over the rows (not known yet in a pipeline)

    def for_update(self, of: str) -> str:
        return f" FOR UPDATE OF {of}" if of else " FOR UPDATE"

    def check_claims(self, conn: Conn, claims: Mapping[int, port.Fence]) -> None:
        if claims:  # first in the pipeline: it holds the command rows until the commit
            conn.execute(
                "SELECT milepost_check_fences(%s::bigint[], %s::bigint[], %s::boolean[])",
                (
                    list(claims),
                    [f.epoch for f in claims.values()],
                    [f.open for f in claims.values()],
                ),
            )

    def write_batch(
        self,
        events: Sequence[ev.Event],
        claim: port.ClaimRequest | None,
        expect: Mapping[int, int] | None,
        claims: Mapping[int, port.Fence],
        careful: bool,
    ) -> tuple[list[ev.Event], port.Claimed, list[ev.Event]]:
        # one pipeline: nothing waits for an answer before the commit unless a seq must be
        # read (`last_seqs`) or an insert that may skip repeated ids must be counted
        with self._claiming_lock:
            self._claiming += not events
            # a claim alone of this process may be writing `command.claimed` to these logs
            # now: numbered from the cache, the append would lose the seq to it and be
            # tried again (a whole transaction); one read of the logs' ends costs less
            read = bool(events) and self._claiming > 0
        # a claim alone numbers its events in a second statement, from a setting local to
        # the transaction: its own BEGIN keeps the two in one
        explicit = read or not self.reads_nothing(events, expect, careful)
        try:
            with self.read() as conn, _one_sync(conn, explicit) as pipe:
                self.check_claims(conn, claims)
                ends: dict[int, int] = {}
                check, vouched = self.insert_events(conn, events, expect, careful, ends, read)
                collect = None if claim is None else self.claim_queued(conn, claim, ends=ends)
                if not vouched:
                    pipe.sync()
                    stored = check()  # before the commit
            if vouched:
                stored = check()  # a strict insert: it failed the commit if it fell short
            claimed, logged = collect() if collect is not None else ([], [])
        finally:
            with self._claiming_lock:
                self._claiming -= not events
        return stored, claimed, logged

    def insert_events(
        self,
        conn: Conn,
        events: Sequence[ev.Event],
        expect: Mapping[int, int] | None,
        careful: bool,
        ends: dict[int, int],
        read: bool = False,
    ) -> tuple[Callable[[], list[ev.Event]], bool]:
        """Queue the numbered insert of `events` and their projections; the call (before
        the commit) returns the events stored, or raises RepeatedId. `ends` is given where
        each log written to ends after the insert (for the claims' events). With it:
        whether the insert is strict (the caller vouched for the logs: a short count
        fails the commit itself, so nothing need be counted before it)."""
        stored, rows, strict = self.number_events(conn, events, expect, careful, ends, read)
        inserted = self.insert_rows(conn, rows, strict=strict) if rows else (lambda: 0)
        self.project(conn, stored)

        def check() -> list[ev.Event]:
            if inserted() != len(stored):
                raise sql.RepeatedId()
            return stored

        return check, strict

    def insert_rows(self, conn: Conn, rows: list[tuple[Any, ...]], strict: bool) -> Any:
        cursor = (_EVENT_INSERT_STRICT if strict else _EVENT_INSERT).execute(conn, rows)
        return lambda: cursor.rowcount

    def insert_commands(self, conn: Conn, rows: list[tuple[Any, ...]]) -> None:
        _COMMAND_INSERT.execute(conn, rows)

    def settle_commands(
        self, conn: Conn, rows: list[tuple[str, float, int]], claims: Mapping[int, port.Fence]
    ) -> None:
        if rows:  # the claims: checked first in the pipeline (`check_claims`)
            _COMMAND_SETTLE.execute(conn, rows)

    def claim_queued(
        self, conn: Conn, req: port.ClaimRequest, *, ends: Mapping[int, int]
    ) -> Collect:
        params = {
            "claimed": port.COMMAND_CLAIMED,
            "worker": req.worker_id,
            "lease": req.lease_s,
            "now": req.now,
            "limit": req.limit,
            "pool": req.pool,
            "driver": req.driver,
        }
        first = block_of(req.new_id, req.limit)  # a list of ids costs a mint and a dump each
        log: dict[str, Any] = {"type": ev.COMMAND_CLAIMED, "now": req.now}
        if first is None:
            log["ids"] = [req.new_id() for _ in range(req.limit)]
        else:
            log["first"] = first
        # after an append: one statement, numbering from the logs as it sees them
        claim, logging = pg_claims.texts(
            bool(ends), req.pool is not None, req.driver is not None, first is not None
        )
        if claim is None:
            cursor = conn.execute(logging, {**params, **log})
        else:
            conn.execute(claim, params)
            cursor = conn.execute(logging, log)

        def collect() -> tuple[port.Claimed, list[ev.Event]]:
            claimed: port.Claimed = []
            logged: list[ev.Event] = []
            for r in cursor.fetchall():
                row = port.CommandRow(*r[:13])
                lease = liveness.lease_of(row, req)
                event = projection.claimed_event(
                    int(r[13]), row, req.worker_id, row.epoch, lease.expires_at, req.now, int(r[14])
                )
                claimed.append(
                    (
                        row,
                        port.Lease(
                            row.command_id,
                            req.worker_id,
                            row.epoch,
                            lease.expires_at,
                            event,
                            lease.lease_s,
                        ),
                    )
                )
                logged.append(event)
            return claimed, logged

        return collect

    # -- the database --------------------------------------------------------------------

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
        with self.txn() as conn:
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
        rows = self.rows("SELECT to_regclass('schema_version') IS NOT NULL")
        if not rows[0][0]:
            return 0
        return int(self.rows("SELECT max(version) FROM schema_version")[0][0] or 0)

    # -- the orchestrator lock and the leader --------------------------------------------

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
                conn = psycopg.connect(
                    self.url, autocommit=True, connect_timeout=max(1, int(self._connect_timeout))
                )
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
                self._lock_pool = self._open_pool(
                    0, max(self._max_size, 16), name="milepost-locks", reset=_unlock_all
                )
            return self._lock_pool
