"""The SQLite dialect of `store.sql`: one file, WAL, IMMEDIATE transactions.

Durability: WAL with `synchronous=NORMAL` by default. Every commit is in the WAL file
before `append` returns, so a crash of the process (SIGKILL included) loses nothing
committed; a power loss or OS crash may lose the last transactions since the previous
checkpoint. `synchronous=FULL` (setting `MILEPOST_SQLITE_SYNCHRONOUS=FULL`) survives
those too, at the cost of an fsync per commit.

What is SQLite's own: one connection behind a lock, `BEGIN IMMEDIATE` (a writer takes the
file's lock up front, so writers of one log need no lock of their own), the claim as a
select and an update in that transaction, and driver errors classified (`errors`): a
locked or unreachable file is `StoreUnavailable`, as on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from milepost.core import events as ev
from milepost.errors import ConcurrencyConflict
from milepost.store import locks, migrations, port, projection, sql

_MIGRATIONS: list[str] = [m.sql for m in migrations.scripts("sqlite")]
"""Version n is `_MIGRATIONS[n - 1]`; the DDL lives in `migrations/sqlite/NNNN_*.sql`."""

_OPEN_WAIT_S = 10.0
"""How long opening waits for other processes opening the same new file (the busy timeout)."""
_COLS = (
    "(event_id, execution_id, seq, parent_event_id, event_type, step, status, result, meta,"
    " worker_id, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
)
_INSERT_EVENT = f"INSERT INTO event {_COLS} ON CONFLICT (event_id) DO NOTHING"
_INSERT_EVENT_STRICT = f"INSERT INTO event {_COLS}"
_CLAIMABLE = (
    f"SELECT {sql.prefixed('c.', sql.CMD_COLS)}, c.lease_s FROM command c JOIN execution x"
    f" ON x.execution_id = c.execution_id WHERE c.status='{port.COMMAND_QUEUED}'"
    " AND x.status='RUNNING' AND x.cancel_requested=0"
)


@functools.cache
def _claimable(pool: bool, driver: bool) -> str:
    """The claim's read for a request with a pool and/or a driver: one string object each,
    so neither it nor its hash in sqlite3's statement cache is made again a claim."""
    return (
        _CLAIMABLE
        + sql.claim_filters(pool, driver)
        + " ORDER BY c.created_at, c.command_id LIMIT ?"
    )


_ALREADY_THERE = frozenset({"SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"})
"""The constraints whose refusal is a conflict: the row is already there."""


class Errors:
    """sqlite3's errors as milepost's: a seq taken (the unique index) is SeqTaken, another
    row already there a ConcurrencyConflict, a locked, busy or unreadable file
    StoreUnavailable, the rest (another constraint) StoreError. A class, not a generator
    context manager: it wraps every statement of the store."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc is not None:
            reraise(exc, self.path)


def reraise(exc: BaseException, path: str) -> NoReturn:
    """Raise the milepost error of a driver error from it; any other exception as it is."""
    mine = translated(exc, path)
    if mine is exc:
        raise exc
    raise mine from exc


def translated(exc: BaseException, path: str) -> BaseException:
    """The milepost error of a driver error (`Errors`); any other exception itself. As on
    PostgreSQL, a row already there is a conflict; another constraint (a foreign key, a
    NOT NULL) is the database failing."""
    if isinstance(exc, sqlite3.IntegrityError) and exc.sqlite_errorname in _ALREADY_THERE:
        if "event.execution_id, event.seq" in str(exc):
            return sql.SeqTaken(str(exc), constraint="event_execution_seq")
        return ConcurrencyConflict(str(exc), constraint=str(exc))
    if isinstance(exc, sqlite3.OperationalError):
        return port.StoreUnavailable(f"database {path}: {exc}", url=f"sqlite:///{path}")
    if isinstance(exc, sqlite3.Error):
        return port.StoreError(f"database {path}: {exc}", url=f"sqlite:///{path}")
    return exc


class _Txn:
    """An IMMEDIATE transaction on the store's connection, under its lock, committed at
    the end of the block, rolled back on any exception (driver errors translated)."""

    def __init__(self, conn: sqlite3.Connection, lock: Any, path: str) -> None:
        self.conn, self.lock, self.path = conn, lock, path

    def __enter__(self) -> sqlite3.Connection:
        self.lock.acquire()
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            self.lock.release()
            reraise(exc, self.path)
        return self.conn

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        try:
            self.conn.execute("ROLLBACK" if exc is not None else "COMMIT")
        except BaseException as failed:
            if exc is None:  # the commit failed: that is the error
                # and it may leave the transaction open (a full disk, a deferred constraint):
                # rolled back, or every later BEGIN on this connection would fail
                if self.conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self.conn.execute("ROLLBACK")
                reraise(failed, self.path)
        finally:
            self.lock.release()
        if exc is not None:
            reraise(exc, self.path)


def check_existing(path: str, hint: str = "") -> None:
    """NoDatabase (`hint` after its message when there is no file) unless `path` is a
    SQLite file with milepost's tables. Opened `mode=rw` (never created, even if the file
    goes between a look and the open) and only read: a file of something else is left as
    it was, not switched to WAL nor migrated."""
    if path == ":memory:":
        raise port.NoDatabase(f"no milepost database at {path}", path=path)
    try:
        conn = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=rw", uri=True)
    except sqlite3.Error as exc:
        if Path(path).exists():  # a folder, a file this user may not open
            raise port.StoreError(f"database {path}: {exc}", url=f"sqlite:///{path}") from exc
        raise port.NoDatabase(f"no milepost database at {path}{hint}", path=path) from None
    try:
        found = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
    except sqlite3.OperationalError as exc:  # locked, busy: the file is there, unreadable now
        raise port.StoreUnavailable(f"database {path}: {exc}", url=f"sqlite:///{path}") from exc
    except sqlite3.Error as exc:  # not a database at all
        raise port.NoDatabase(f"no milepost database at {path}: {exc}", path=path) from None
    finally:
        conn.close()
    if found is None:
        raise port.NoDatabase(
            f"no milepost database at {path}: the file holds no milepost tables", path=path
        )


class SQLiteStore(sql.SQLStore):
    """Implements `port.Store` on one SQLite file (or `:memory:` for tests)."""

    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        super().__init__()
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # autocommit mode: transactions are opened explicitly with BEGIN IMMEDIATE so a
        # writer takes the lock up front instead of failing to upgrade half-way through
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._lock = threading.RLock()
        with Errors(self.path):
            self._wal()
            self._conn.execute(f"PRAGMA synchronous={synchronous}")
            self._conn.execute("PRAGMA busy_timeout=10000")
            self._conn.execute("PRAGMA foreign_keys=ON")
        self.migrate()

    # -- the dialect's hooks ---------------------------------------------------------------

    def _wal(self) -> None:
        """Switch the file to WAL. On a new file that other processes are opening too, the
        switch may find it locked at once: SQLite does not wait on the busy handler there."""
        deadline = time.monotonic() + _OPEN_WAIT_S
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(0.005)

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, Errors(self.path):
            yield self._conn

    def txn(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return _Txn(self._conn, self._lock, self.path)

    def insert_rows(
        self, conn: sqlite3.Connection, rows: list[tuple[Any, ...]], strict: bool
    ) -> Any:
        before = conn.total_changes
        conn.executemany(_INSERT_EVENT_STRICT if strict else _INSERT_EVENT, rows)
        inserted = conn.total_changes - before
        return lambda: inserted

    def write_batch(
        self,
        events: Sequence[ev.Event],
        claim: port.ClaimRequest | None,
        expect: Mapping[int, int] | None,
        claims: Mapping[int, port.Fence],
        careful: bool,
    ) -> tuple[list[ev.Event], port.Claimed, list[ev.Event]]:
        # the projections first (the settling UPDATE checks the claims by its row count),
        # then the claim, then the events and the claims' events in one insert
        ends: dict[int, int] = {}
        with self.txn() as conn:
            stored, rows, strict = self.number_events(conn, events, expect, careful, ends)
            self.project(conn, stored, claims)
            claimed, logged = (
                ([], []) if claim is None else self._claim(conn, claim, ends, rows, careful)
            )
            if rows:
                before = conn.total_changes
                conn.executemany(_INSERT_EVENT_STRICT if strict else _INSERT_EVENT, rows)
                if conn.total_changes - before != len(rows):
                    raise sql.RepeatedId()
        return stored, claimed, logged

    def _claim(
        self,
        conn: sqlite3.Connection,
        req: port.ClaimRequest,
        ends: Mapping[int, int],
        rows_out: list[tuple[Any, ...]],
        careful: bool,
    ) -> tuple[port.Claimed, list[ev.Event]]:
        """Claim the oldest claimable commands; their `command.claimed` events, numbered
        after `ends` (the logs this transaction appended to) or the log's end (as the
        append's are: from the cache unless `careful`; another process's append to such a
        log makes the insert fail and the careful retry read it), go to `rows_out`. The
        IMMEDIATE transaction holds the write lock: no other claimer reads in between."""
        params: list[Any] = []
        if req.pool is not None:
            params.append(req.pool)
        if req.driver is not None:
            params.append(req.driver)
        params.append(req.limit)
        # the oldest claimable rows, read, then taken one row per statement: an UPDATE of
        # several rows at once opens a statement journal, whose page bitmap is as large as
        # the database file (tens of microseconds a claim, growing with the file)
        rows = conn.execute(
            _claimable(req.pool is not None, req.driver is not None), params
        ).fetchall()
        if not rows:
            return [], []
        # each leased for its step's liveness (r[13], `lease_s`), else for what was asked
        expires = {r[0]: req.now + (req.lease_s if r[13] is None else float(r[13])) for r in rows}
        self.many(
            conn,
            "UPDATE command SET status=?, worker_id=?, epoch=?, lease_expires_at=?,"
            " claimed_at=?, updated_at=? WHERE command_id=?",
            [
                (
                    port.COMMAND_CLAIMED,
                    req.worker_id,
                    r[9] + 1,
                    expires[r[0]],
                    req.now,
                    req.now,
                    r[0],
                )
                for r in rows
            ],
        )
        last = {x: ends[x] for x in {r[1] for r in rows} if x in ends}
        rest = sorted({r[1] for r in rows if r[1] not in ends})
        if rest:
            last.update(self.last_seqs(conn, rest, {}, careful))
        claimed: port.Claimed = []
        logged: list[ev.Event] = []
        for r in rows:
            row = port.CommandRow(
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                port.COMMAND_CLAIMED,
                req.worker_id,
                r[9] + 1,
                expires[r[0]],
                r[11],
                r[12],
            )
            seq = last[row.execution_id] = last[row.execution_id] + 1
            event = projection.claimed_event(
                req.new_id(), row, req.worker_id, row.epoch, expires[r[0]], req.now, seq
            )
            claimed.append(
                (
                    row,
                    port.Lease(
                        row.command_id,
                        req.worker_id,
                        row.epoch,
                        expires[r[0]],
                        event,
                        expires[r[0]] - req.now,
                    ),
                )
            )
            logged.append(event)
            rows_out.append(sql.event_row(event, self.encode_result(conn, event)))
        return claimed, logged

    # -- the file --------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def migrate(self) -> int:
        with self.read():
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"
            )
            row = self._conn.execute("SELECT max(version) FROM schema_version").fetchone()
            current = row[0] or 0
            for version, script in enumerate(_MIGRATIONS, start=1):
                if version <= current:
                    continue
                # executescript commits; the version row goes in the same script so a crash
                # cannot leave a migrated schema that claims to be older. IMMEDIATE: of two
                # processes opening a new file at once, the second waits for the first's
                # commit, then finds its tables there and the version it wrote
                try:
                    self._conn.executescript(
                        f"BEGIN IMMEDIATE;\n{script}\n"
                        f"INSERT INTO schema_version VALUES ({version});\n"
                        "COMMIT;"
                    )
                except sqlite3.OperationalError:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    row = self._conn.execute("SELECT max(version) FROM schema_version").fetchone()
                    if (row[0] or 0) < version:
                        raise  # not another process's migration: a real failure
            return len(_MIGRATIONS)

    def schema_version(self) -> int:
        return int(self.rows("SELECT max(version) FROM schema_version")[0][0] or 0)

    def lock_execution(self, execution_id: int) -> contextlib.AbstractContextManager[None]:
        """An in-process reentrant lock per (database file, execution), shared by every
        SQLiteStore of this process on that file. Other processes are not excluded: SQLite's
        write lock already serializes their appends, and the embedded engine is the only
        orchestrator of its file (`milepost cancel` from another process only appends)."""
        key = self.path if self.path != ":memory:" else f":memory:{id(self)}"
        return locks.EXECUTION_LOCKS.hold((os.path.realpath(key), execution_id))
