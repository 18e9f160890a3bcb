"""The SQLite adapter: one file, WAL, IMMEDIATE transactions, versioned migrations.

Durability: WAL with `synchronous=NORMAL` by default. Every commit is in the WAL file
before `append` returns, so a crash of the process (SIGKILL included) loses nothing
committed; a power loss or OS crash may lose the last transactions since the previous
checkpoint. `synchronous=FULL` (setting `MILEPOST_SQLITE_SYNCHRONOUS=FULL`) survives
those too, at the cost of an fsync per commit.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from milepost.core import events as ev
from milepost.errors import ClaimRefused, ConcurrencyConflict, MilepostError
from milepost.store import migrations, port

_MIGRATIONS: list[str] = [m.sql for m in migrations.scripts("sqlite")]
"""Version n is `_MIGRATIONS[n - 1]`; the DDL lives in `migrations/sqlite/NNNN_*.sql`."""

_BLOB_PREFIX = "milepost://results/"
_OPEN_WAIT_S = 10.0
"""How long opening waits for other processes opening the same new file (the busy timeout)."""
_INSERT_EVENT = (
    "INSERT INTO event (event_id, execution_id, seq, parent_event_id, event_type, step, status,"
    " result, meta, worker_id, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
    " ON CONFLICT (event_id) DO NOTHING"
)


class SQLiteStore:
    """Implements `port.Store` on one SQLite file (or `:memory:` for tests)."""

    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # autocommit mode: transactions are opened explicitly with BEGIN IMMEDIATE so a
        # writer takes the lock up front instead of failing to upgrade half-way through
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._lock = threading.RLock()
        self._last_seq: dict[int, int] = {}
        """execution -> last seq appended by this store; checked by the unique index."""
        self._wal()
        self._conn.execute(f"PRAGMA synchronous={synchronous}")
        self._conn.execute("PRAGMA busy_timeout=10000")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self.migrate()

    # -- plumbing --------------------------------------------------------------------------

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
    def _txn(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def migrate(self) -> int:
        with self._lock:
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
                    self._conn.executescript(f"BEGIN IMMEDIATE;\n{script}\n"
                                             f"INSERT INTO schema_version VALUES ({version});\n"
                                             "COMMIT;")  # fmt: skip
                except sqlite3.OperationalError:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    row = self._conn.execute("SELECT max(version) FROM schema_version").fetchone()
                    if (row[0] or 0) < version:
                        raise  # not another process's migration: a real failure
            return len(_MIGRATIONS)

    def schema_version(self) -> int:
        return int(self._query("SELECT max(version) FROM schema_version")[0][0] or 0)

    # -- events ----------------------------------------------------------------------------

    def append(self, events: Sequence[ev.Event], *, expect: Mapping[int, int] | None = None,
               check_claims: bool = False) -> list[ev.Event]:  # fmt: skip
        return self.append_and_claim(events, None, expect=expect, check_claims=check_claims)[0]

    def append_and_claim(self, events: Sequence[ev.Event], claim: port.ClaimRequest | None, *,
                         expect: Mapping[int, int] | None = None, check_claims: bool = False,
                         ) -> tuple[list[ev.Event], port.Claimed]:  # fmt: skip
        if not events and claim is None:
            return [], []
        claims = port.claims_reported(events) if check_claims else {}
        for _ in range(3):
            try:
                with self._txn() as conn:
                    stored = self._append_txn(conn, events, expect, claims) if events else []
                    claimed = self._claim_next_txn(conn, claim) if claim is not None else []
                    return stored, claimed
            except sqlite3.IntegrityError as exc:
                # another process appended to one of these executions since we cached its
                # last seq (the unique (execution_id, seq) index caught it): re-read, retry
                self._last_seq.clear()
                if "seq" not in str(exc):
                    raise
            except BaseException:
                self._last_seq.clear()  # the cache may count rows that were rolled back
                raise
        raise ConcurrencyConflict("could not append: the log kept moving",
                                  execution_ids=sorted({e.execution_id for e in events}))

    def _check_claims_txn(self, conn: sqlite3.Connection, claims: Mapping[int, int]) -> None:
        """Raise ClaimMoved unless every command is claimed with that epoch (the IMMEDIATE
        transaction holds the database, so nothing moves before the commit)."""
        if not claims:
            return
        marks = ",".join("?" * len(claims))
        live = {int(r[0]): int(r[1]) for r in conn.execute(
            f"SELECT command_id, epoch FROM command WHERE command_id IN ({marks})"
            " AND status=?", (*claims, port.COMMAND_CLAIMED))}  # fmt: skip
        if any(live.get(cid) != epoch for cid, epoch in claims.items()):
            raise port.ClaimMoved("a reported claim is no longer live",
                                  command_ids=sorted(str(c) for c in claims))  # fmt: skip

    def _append_txn(self, conn: sqlite3.Connection, events: Sequence[ev.Event],
                    expect: Mapping[int, int] | None,
                    claims: Mapping[int, int]) -> list[ev.Event]:  # fmt: skip
        self._check_claims_txn(conn, claims)
        last = self._last_seq
        for xid in {e.execution_id for e in events}:
            if xid not in last:
                row = conn.execute("SELECT max(seq) FROM event WHERE execution_id=?",
                                   (xid,)).fetchone()  # fmt: skip
                last[xid] = int(row[0] or 0)
            if expect and xid in expect and last[xid] != expect[xid]:
                # the cache may be behind another process: then the unique index fails the
                # insert below, the retry re-reads, and this check sees the real seq
                raise port.LogMoved("another writer appended to this execution first",
                                    execution_ids=[str(xid)])  # fmt: skip
        stored: list[ev.Event] = []
        rows = []
        for event in events:
            xid = event.execution_id
            last[xid] += 1
            stored.append(_with_seq(event, last[xid]))
            rows.append((event.event_id, xid, last[xid], event.parent_event_id,
                         event.event_type, event.step, event.status,
                         self._encode_result_txn(conn, event),
                         json.dumps(event.meta) if event.meta else None, event.worker_id,
                         event.created_at))  # fmt: skip
        before = conn.total_changes
        conn.executemany(_INSERT_EVENT, rows)
        if conn.total_changes - before != len(rows):
            # some event ids were already in the log: redo row by row to skip just those
            conn.execute("ROLLBACK")
            conn.execute("BEGIN IMMEDIATE")
            self._last_seq.clear()
            self._check_claims_txn(conn, claims)  # a new transaction: check again
            return self._append_one_by_one_txn(conn, events)
        self._project_txn(conn, stored)
        return stored

    def _known_events_txn(self, conn: sqlite3.Connection,
                          events: Sequence[ev.Event]) -> dict[int, ev.Event]:  # fmt: skip
        """The log's events that have the ids of these."""
        ids = list({e.event_id for e in events})
        known: dict[int, ev.Event] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            rows = conn.execute(
                "SELECT seq, event_id, execution_id, parent_event_id, event_type, step, status,"
                f" result, meta, worker_id, created_at FROM event WHERE event_id IN"
                f" ({','.join('?' * len(chunk))})", chunk).fetchall()  # fmt: skip
            known.update((int(r[1]), self._decode(r)) for r in rows)
        return known

    def _append_one_by_one_txn(self, conn: sqlite3.Connection,
                               events: Sequence[ev.Event]) -> list[ev.Event]:  # fmt: skip
        # the IMMEDIATE transaction holds the file: the ids read here stay as they are
        events = port.new_events(events, self._known_events_txn(conn, events))
        stored: list[ev.Event] = []
        for event in events:
            xid = event.execution_id
            row = conn.execute("SELECT max(seq) FROM event WHERE execution_id=?",
                               (xid,)).fetchone()  # fmt: skip
            seq = int(row[0] or 0) + 1
            cur = conn.execute(_INSERT_EVENT, (
                event.event_id, xid, seq, event.parent_event_id, event.event_type, event.step,
                event.status, self._encode_result_txn(conn, event),
                json.dumps(event.meta) if event.meta else None, event.worker_id,
                event.created_at))  # fmt: skip
            if cur.rowcount == 0:  # cannot happen: `new_events` left out the known ids
                raise port.EventIdConflict("event id is already in the log",
                                           event_ids=[str(event.event_id)])  # fmt: skip
            stored.append(_with_seq(event, seq))
        self._project_txn(conn, stored)
        return stored

    def _encode_result_txn(self, conn: sqlite3.Connection, event: ev.Event) -> str:
        envelope = event.envelope_result()
        text = json.dumps(envelope, default=str)
        if len(text) <= port.BLOB_THRESHOLD:
            return text
        # large payloads live in the result store; the event keeps a reference that names
        # the execution, so a sharded store finds the database that holds it
        data = json.dumps(event.payload, default=str).encode()
        cur = conn.execute(
            "INSERT INTO result_blob (execution_id, data, created_at) VALUES (?,?,?)",
            (event.execution_id, data, event.created_at),
        )
        ref = {"uri": f"{_BLOB_PREFIX}{event.execution_id}/{cur.lastrowid}", "size": len(data)}
        return json.dumps({"status": envelope["status"], "reference": ref})

    def _project_txn(self, conn: sqlite3.Connection, events: list[ev.Event]) -> None:
        """Write the projections of stored events: the execution list and the command queue.
        A stale report (`meta.stale`, fenced by the server) changes none of them."""
        issued, settled, expired = [], [], []
        terminal: list[ev.Event] = []
        for event in events:
            if event.meta.get("stale"):
                continue
            p = event.payload
            t = event.event_type
            if t == ev.COMMAND_ISSUED:
                issued.append((p["command_id"], event.execution_id, event.step, p["run"],
                               p.get("index", -1), p.get("attempt", 1),
                               p.get("idempotency_key", ""), port.COMMAND_QUEUED,
                               p.get("pool") or "default", event.created_at,
                               event.created_at))  # fmt: skip
            elif t in ev.SETTLING_REPORTS:
                status = (port.COMMAND_COMPLETED if t == ev.COMMAND_COMPLETED
                          else port.COMMAND_FAILED)  # fmt: skip
                settled.append((status, event.created_at, p["command_id"]))
            elif t == ev.COMMAND_LEASE_EXPIRED:
                # the attempt is lost; only the claim that lapsed (its epoch), not a newer one
                epoch = p.get("epoch", event.meta.get("epoch"))
                expired.append((port.COMMAND_FAILED, event.created_at, p["command_id"],
                                port.COMMAND_CLAIMED, epoch, epoch))  # fmt: skip
            elif t == ev.EXECUTION_STARTED:
                conn.execute(
                    "INSERT INTO execution (execution_id, path, version, status,"
                    " parent_execution_id, created_at, updated_at) VALUES (?,?,?,?,?,?,?)"
                    " ON CONFLICT (execution_id) DO NOTHING",
                    (event.execution_id, p.get("path", ""), p.get("version"), "RUNNING",
                     p.get("parent_execution_id"), event.created_at, event.created_at),
                )  # fmt: skip
            elif t == ev.EXECUTION_CANCEL_REQUESTED:
                conn.execute("UPDATE execution SET cancel_requested=1 WHERE execution_id=?",
                             (event.execution_id,))  # fmt: skip
            elif t in ev.TERMINAL_EXECUTION_EVENTS:
                terminal.append(event)  # after the command rows of the same batch exist
        if issued:
            conn.executemany(
                "INSERT INTO command (command_id, execution_id, step, run, idx, attempt,"
                " idempotency_key, status, pool, created_at, updated_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                issued,
            )
        if settled:
            conn.executemany("UPDATE command SET status=?, updated_at=? WHERE command_id=?",
                             settled)  # fmt: skip
        if expired:
            conn.executemany("UPDATE command SET status=?, updated_at=? WHERE command_id=?"
                             " AND status=? AND (? IS NULL OR epoch=?)", expired)  # fmt: skip
        for event in terminal:
            self._project_terminal_txn(conn, event)

    def _project_terminal_txn(self, conn: sqlite3.Connection, event: ev.Event) -> None:
        status = {ev.EXECUTION_COMPLETED: "COMPLETED", ev.EXECUTION_FAILED: "FAILED",
                  ev.EXECUTION_CANCELLED: "CANCELLED"}[event.event_type]  # fmt: skip
        error = event.payload.get("error")
        conn.execute(
            "UPDATE execution SET status=?, error=?, updated_at=? WHERE execution_id=?",
            (status, json.dumps(error) if error else None, event.created_at, event.execution_id),
        )
        # whatever was still queued or claimed will never run now
        conn.execute(
            "UPDATE command SET status=?, updated_at=? WHERE execution_id=? AND status IN (?, ?)",
            (port.COMMAND_CANCELLED, event.created_at, event.execution_id, port.COMMAND_QUEUED,
             port.COMMAND_CLAIMED),
        )  # fmt: skip
        self._last_seq.pop(event.execution_id, None)

    def load(self, execution_id: int, after_seq: int = 0) -> list[ev.Event]:
        rows = self._query(
            "SELECT seq, event_id, execution_id, parent_event_id, event_type, step, status,"
            " result, meta, worker_id, created_at FROM event"
            " WHERE execution_id=? AND seq>? ORDER BY seq",
            (execution_id, after_seq),
        )
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
        return int(self._query("SELECT count(*) FROM event WHERE execution_id=?",
                               (execution_id,))[0][0])  # fmt: skip

    # -- executions ------------------------------------------------------------------------

    _EXEC_COLS = ("execution_id, path, version, status, created_at, updated_at,"
                  " parent_execution_id, error, cancel_requested")  # fmt: skip

    @staticmethod
    def _execution(row: tuple[Any, ...]) -> port.ExecutionRow:
        xid, path, version, status, created, updated, parent, error, cancel = row
        return port.ExecutionRow(xid, path, version, status, created, updated, parent,
                                 json.loads(error) if error else None, bool(cancel))  # fmt: skip

    def get_execution(self, execution_id: int) -> port.ExecutionRow | None:
        rows = self._query(f"SELECT {self._EXEC_COLS} FROM execution WHERE execution_id=?",
                           (execution_id,))  # fmt: skip
        return self._execution(rows[0]) if rows else None

    def list_executions(self, *, status: str | None = None, path: str | None = None,
                        limit: int = 100, offset: int = 0) -> list[port.ExecutionRow]:  # fmt: skip
        where, params = [], []
        if status:
            where.append("status=?")
            params.append(status.upper())
        if path:
            where.append("path=?")
            params.append(path)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._query(
            f"SELECT {self._EXEC_COLS} FROM execution {clause}"
            " ORDER BY created_at DESC, execution_id DESC LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [self._execution(r) for r in rows]

    # -- commands --------------------------------------------------------------------------

    _CMD_COLS = ("command_id, execution_id, step, run, idx, attempt, idempotency_key, status,"
                 " worker_id, epoch, lease_expires_at, created_at")  # fmt: skip

    def get_commands(self, command_ids: Sequence[int]) -> dict[int, port.CommandRow]:
        ids = list(dict.fromkeys(command_ids))
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self._query(f"SELECT {self._CMD_COLS} FROM command WHERE command_id IN ({marks})",
                           ids)  # fmt: skip
        return {int(r[0]): port.CommandRow(*r) for r in rows}

    def get_command(self, command_id: int) -> port.CommandRow | None:
        rows = self._query(f"SELECT {self._CMD_COLS} FROM command WHERE command_id=?",
                           (command_id,))  # fmt: skip
        return port.CommandRow(*rows[0]) if rows else None

    def open_commands(self, execution_id: int | None = None) -> list[port.CommandRow]:
        sql = f"SELECT {self._CMD_COLS} FROM command WHERE status IN (?, ?)"
        params: list[Any] = [port.COMMAND_QUEUED, port.COMMAND_CLAIMED]
        if execution_id is not None:
            sql += " AND execution_id=?"
            params.append(execution_id)
        return [port.CommandRow(*r) for r in self._query(sql + " ORDER BY command_id", params)]

    def claim(self, command_id: int, worker_id: str, now: float, lease_s: float) -> port.Lease:
        with self._txn() as conn:
            row = conn.execute(
                "SELECT c.status, c.worker_id, c.epoch, c.lease_expires_at, x.status,"
                " x.cancel_requested FROM command c LEFT JOIN execution x"
                " ON x.execution_id = c.execution_id WHERE c.command_id=?",
                (command_id,),
            ).fetchone()
            if row is None:
                raise MilepostError(f"unknown command {command_id}", command_id=str(command_id))
            execution = None if row[4] is None else (row[4], bool(row[5]))
            epoch_now = port.claim_epoch(command_id, worker_id, now, row[:4], execution)
            conn.execute(
                "UPDATE command SET status=?, worker_id=?, epoch=?, lease_expires_at=?,"
                " updated_at=? WHERE command_id=?",
                (port.COMMAND_CLAIMED, worker_id, epoch_now, now + lease_s, now, command_id),
            )
        return port.Lease(command_id, worker_id, epoch_now, now + lease_s)

    def heartbeat(self, command_id: int, worker_id: str, epoch: int, now: float,
                  lease_s: float) -> port.Lease:  # fmt: skip
        with self._txn() as conn:
            cur = conn.execute(
                "UPDATE command SET lease_expires_at=?, updated_at=? WHERE command_id=?"
                " AND status=? AND worker_id=? AND epoch=?",
                (now + lease_s, now, command_id, port.COMMAND_CLAIMED, worker_id, epoch),
            )
            if cur.rowcount == 0:
                raise ClaimRefused("no live claim with that epoch", reason="stale_epoch",
                                   command_id=str(command_id))  # fmt: skip
        return port.Lease(command_id, worker_id, epoch, now + lease_s)

    def expired_claims(self, now: float) -> list[port.CommandRow]:
        rows = self._query(
            f"SELECT {self._CMD_COLS} FROM command WHERE status=? AND lease_expires_at<?",
            (port.COMMAND_CLAIMED, now),
        )
        return [port.CommandRow(*r) for r in rows]

    # -- snapshots -------------------------------------------------------------------------

    def save_snapshot(self, execution_id: int, seq: int, data: bytes) -> None:
        with self._txn() as conn:
            conn.execute(
                "INSERT INTO snapshot (execution_id, seq, data) VALUES (?,?,?)"
                " ON CONFLICT (execution_id) DO UPDATE SET seq=excluded.seq, data=excluded.data"
                " WHERE excluded.seq > snapshot.seq",
                (execution_id, seq, data),
            )

    def load_snapshot(self, execution_id: int) -> tuple[int, bytes] | None:
        rows = self._query("SELECT seq, data FROM snapshot WHERE execution_id=?", (execution_id,))
        return (int(rows[0][0]), bytes(rows[0][1])) if rows else None

    # -- catalog ---------------------------------------------------------------------------

    def register_playbook(self, path: str, content: str, now: float) -> port.CatalogEntry:
        with self._txn() as conn:
            row = conn.execute(
                "SELECT version, content, created_at FROM catalog WHERE path=?"
                " ORDER BY version DESC LIMIT 1",
                (path,),
            ).fetchone()
            if row is not None and row[1] == content:
                return port.CatalogEntry(path, int(row[0]), content, float(row[2]))
            version = (int(row[0]) if row else 0) + 1
            conn.execute("INSERT INTO catalog (path, version, content, created_at) VALUES (?,?,?,?)",
                         (path, version, content, now))  # fmt: skip
        return port.CatalogEntry(path, version, content, now)

    def get_playbook(self, path: str, version: int | None = None) -> port.CatalogEntry | None:
        if version is None:
            rows = self._query("SELECT path, version, content, created_at FROM catalog"
                               " WHERE path=? ORDER BY version DESC LIMIT 1", (path,))  # fmt: skip
        else:
            rows = self._query("SELECT path, version, content, created_at FROM catalog"
                               " WHERE path=? AND version=?", (path, version))  # fmt: skip
        return port.CatalogEntry(*rows[0]) if rows else None

    def list_playbooks(self) -> list[port.CatalogEntry]:
        rows = self._query("SELECT path, version, content, created_at FROM catalog"
                           " ORDER BY path, version")  # fmt: skip
        return [port.CatalogEntry(*r) for r in rows]

    # -- result store ----------------------------------------------------------------------

    def put_blob(self, execution_id: int, data: bytes, now: float) -> str:
        with self._txn() as conn:
            cur = conn.execute(
                "INSERT INTO result_blob (execution_id, data, created_at) VALUES (?,?,?)",
                (execution_id, data, now),
            )
        return f"{_BLOB_PREFIX}{execution_id}/{cur.lastrowid}"

    def get_blob(self, uri: str) -> bytes:
        # `<execution_id>/<blob_id>`, and the execution must match; `<blob_id>` alone is
        # what this adapter wrote before the execution was named, still read
        xid, blob_id = port.parse_blob_uri(uri)
        rows = self._query("SELECT data, execution_id FROM result_blob WHERE blob_id=?",
                           (blob_id,))  # fmt: skip
        if not rows or (xid is not None and rows[0][1] != xid):
            raise MilepostError(f"unknown result reference {uri!r}", uri=uri)
        return bytes(rows[0][0])

    # -- credentials and tokens ------------------------------------------------------------

    def put_credential(self, name: str, type: str, ciphertext: bytes,
                       now: float) -> port.CredentialRow:  # fmt: skip
        with self._txn() as conn:
            conn.execute(
                "INSERT INTO credential (name, type, ciphertext, created_at, updated_at)"
                " VALUES (?,?,?,?,?) ON CONFLICT (name) DO UPDATE SET type=excluded.type,"
                " ciphertext=excluded.ciphertext, updated_at=excluded.updated_at",
                (name, type, ciphertext, now, now),
            )
            created = conn.execute("SELECT created_at FROM credential WHERE name=?",
                                   (name,)).fetchone()[0]  # fmt: skip
        return port.CredentialRow(name, type, bytes(ciphertext), float(created), now)

    def get_credential(self, name: str) -> port.CredentialRow | None:
        rows = self._query("SELECT name, type, ciphertext, created_at, updated_at"
                           " FROM credential WHERE name=?", (name,))  # fmt: skip
        if not rows:
            return None
        name_, type_, data, created, updated = rows[0]
        return port.CredentialRow(name_, type_, bytes(data), created, updated)

    def list_credentials(self) -> list[port.CredentialRow]:
        rows = self._query("SELECT name, type, NULL, created_at, updated_at FROM credential"
                           " ORDER BY name")  # fmt: skip
        return [port.CredentialRow(*r) for r in rows]

    def delete_credential(self, name: str) -> bool:
        with self._txn() as conn:
            return conn.execute("DELETE FROM credential WHERE name=?", (name,)).rowcount > 0

    def create_token(self, token_hash: str, role: str, name: str | None,
                     now: float) -> port.TokenRow:  # fmt: skip
        with self._txn() as conn:
            cur = conn.execute(
                "INSERT INTO token (token_hash, role, name, created_at) VALUES (?,?,?,?)"
                " ON CONFLICT (token_hash) DO NOTHING",
                (token_hash, role, name, now),
            )
            if cur.rowcount == 0:
                raise ConcurrencyConflict("a token with that hash exists", constraint="token")
        return port.TokenRow(token_hash, role, name, now)

    def get_token(self, token_hash: str) -> port.TokenRow | None:
        rows = self._query("SELECT token_hash, role, name, created_at FROM token"
                           " WHERE token_hash=?", (token_hash,))  # fmt: skip
        return port.TokenRow(*rows[0]) if rows else None

    # -- the polling claim path, the reconciler, the orchestrator lock ---------------------

    def claim_next(self, worker_id: str, now: float, lease_s: float, limit: int = 1,
                   pool: str | None = None) -> list[tuple[port.CommandRow, port.Lease]]:  # fmt: skip
        if limit <= 0:
            return []
        # the IMMEDIATE transaction holds the write lock: no other claimer reads in between
        with self._txn() as conn:
            return self._claim_next_txn(conn, port.ClaimRequest(worker_id, now, lease_s, limit,
                                                                pool))  # fmt: skip

    def _claim_next_txn(self, conn: sqlite3.Connection, req: port.ClaimRequest) -> port.Claimed:
        if req.limit <= 0:
            return []
        sql = ("SELECT c.command_id FROM command c JOIN execution x"
               " ON x.execution_id = c.execution_id WHERE c.status=? AND x.status='RUNNING'"
               " AND x.cancel_requested=0")  # fmt: skip
        params: list[Any] = [port.COMMAND_QUEUED]
        if req.pool is not None:
            sql += " AND c.pool=?"
            params.append(req.pool)
        if req.executions is not None:
            if not req.executions:
                return []
            sql += f" AND c.execution_id IN ({','.join('?' * len(req.executions))})"
            params.extend(req.executions)
        ids = [r[0] for r in conn.execute(
            sql + " ORDER BY c.created_at, c.command_id LIMIT ?", (*params, req.limit))]  # fmt: skip
        if not ids:
            return []
        expires = req.now + req.lease_s
        conn.executemany(
            "UPDATE command SET status=?, worker_id=?, epoch=epoch+1, lease_expires_at=?,"
            " updated_at=? WHERE command_id=?",
            [(port.COMMAND_CLAIMED, req.worker_id, expires, req.now, cid) for cid in ids],
        )
        marks = ",".join("?" * len(ids))
        rows = conn.execute(f"SELECT {self._CMD_COLS} FROM command WHERE command_id IN"
                            f" ({marks}) ORDER BY created_at, command_id", ids).fetchall()  # fmt: skip
        commands = [port.CommandRow(*r) for r in rows]
        return [(c, port.Lease(c.command_id, req.worker_id, c.epoch, expires)) for c in commands]

    def release(self, command_id: int, worker_id: str, epoch: int, now: float) -> bool:
        with self._txn() as conn:
            cur = conn.execute(
                "UPDATE command SET status=?, worker_id=NULL, lease_expires_at=NULL,"
                " updated_at=? WHERE command_id=? AND status=? AND worker_id=? AND epoch=?",
                (port.COMMAND_QUEUED, now, command_id, port.COMMAND_CLAIMED, worker_id, epoch),
            )
            if cur.rowcount == 0:
                raise ClaimRefused("no live claim with that epoch", reason="stale_epoch",
                                   command_id=str(command_id))  # fmt: skip
        return True

    def executions_to_redrive(self, now: float, idle_s: float = 5.0) -> list[int]:
        rows = self._query(_REDRIVE, (port.COMMAND_QUEUED, port.COMMAND_CLAIMED, now - idle_s))
        return [int(r[0]) for r in rows]

    def lease_machine_id(self, holder: str, now: float, ttl: float) -> int:
        with self._txn() as conn:
            live = {int(r[0]) for r in conn.execute(
                "SELECT machine_id FROM machine_lease WHERE expires_at > ?", (now,))}  # fmt: skip
            machine_id = port.free_machine_id(live)
            conn.execute(
                "INSERT INTO machine_lease (machine_id, holder, expires_at) VALUES (?,?,?)"
                " ON CONFLICT (machine_id) DO UPDATE SET holder=excluded.holder,"
                " expires_at=excluded.expires_at", (machine_id, holder, now + ttl))  # fmt: skip
        return machine_id

    def renew_machine_id(self, machine_id: int, holder: str, now: float, ttl: float) -> bool:
        with self._txn() as conn:
            return conn.execute("UPDATE machine_lease SET expires_at=? WHERE machine_id=?"
                                " AND holder=?", (now + ttl, machine_id, holder)).rowcount > 0  # fmt: skip

    def release_machine_id(self, machine_id: int, holder: str) -> bool:
        with self._txn() as conn:
            return conn.execute("DELETE FROM machine_lease WHERE machine_id=? AND holder=?",
                                (machine_id, holder)).rowcount > 0  # fmt: skip

    def lock_execution(self, execution_id: int) -> contextlib.AbstractContextManager[None]:
        """An in-process reentrant lock per (database file, execution), shared by every
        SQLiteStore of this process on that file. Other processes are not excluded: SQLite's
        write lock already serializes their appends, and the embedded engine is the only
        orchestrator of its file (`milepost cancel` from another process only appends)."""
        key = self.path if self.path != ":memory:" else f":memory:{id(self)}"
        return _EXECUTION_LOCKS.hold((os.path.realpath(key), execution_id))


    # -- the driver of an embedded execution -----------------------------------------------

    def acquire_driver(self, execution_id: int, holder: str, now: float, ttl: float, *,
                       replace: str | None = None) -> port.DriverLease:  # fmt: skip
        with self._txn() as conn:
            row = conn.execute(_ACQUIRE_DRIVER, (execution_id, holder, now + ttl, now,
                                                 replace)).fetchone()  # fmt: skip
            if row is None:  # the upsert's condition held nothing: someone else's live lease
                held = conn.execute("SELECT holder, expires_at FROM execution_driver"
                                    " WHERE execution_id=?", (execution_id,)).fetchone()  # fmt: skip
                raise port.DriverBusy(port.DriverLease(execution_id, held[0], float(held[1])))
        return port.DriverLease(execution_id, holder, float(row[0]))

    def renew_driver(self, execution_id: int, holder: str, now: float, ttl: float) -> bool:
        with self._txn() as conn:
            return conn.execute("UPDATE execution_driver SET expires_at=? WHERE execution_id=?"
                                " AND holder=?", (now + ttl, execution_id, holder)).rowcount > 0  # fmt: skip

    def release_driver(self, execution_id: int, holder: str, now: float) -> bool:
        with self._txn() as conn:
            return conn.execute("UPDATE execution_driver SET expires_at=min(expires_at, ?)"
                                " WHERE execution_id=? AND holder=?",
                                (now, execution_id, holder)).rowcount > 0  # fmt: skip

    def get_driver(self, execution_id: int) -> port.DriverLease | None:
        rows = self._query("SELECT holder, expires_at FROM execution_driver WHERE"
                           " execution_id=?", (execution_id,))  # fmt: skip
        return port.DriverLease(execution_id, rows[0][0], float(rows[0][1])) if rows else None


_ACQUIRE_DRIVER = (
    "INSERT INTO execution_driver (execution_id, holder, expires_at) VALUES (?1, ?2, ?3)"
    " ON CONFLICT (execution_id) DO UPDATE SET holder=excluded.holder,"
    " expires_at=excluded.expires_at WHERE execution_driver.holder=excluded.holder"
    " OR execution_driver.expires_at<=?4 OR execution_driver.holder=?5 RETURNING expires_at"
)

_REDRIVE = (
    "SELECT x.execution_id FROM execution x WHERE x.status='RUNNING'"
    " AND NOT EXISTS (SELECT 1 FROM command c WHERE c.execution_id = x.execution_id"
    " AND c.status IN (?, ?))"
    " AND COALESCE((SELECT e.created_at FROM event e WHERE e.execution_id = x.execution_id"
    " ORDER BY e.seq DESC LIMIT 1), x.updated_at) < ?"
    " ORDER BY x.execution_id"
)


class _LockTable:
    """Reentrant locks by key, created on first use and dropped when nobody holds them."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locks: dict[Any, tuple[threading.RLock, int]] = {}

    @contextlib.contextmanager
    def hold(self, key: Any) -> Iterator[None]:
        with self._mutex:
            lock, users = self._locks.get(key) or (threading.RLock(), 0)
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._mutex:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)


_EXECUTION_LOCKS = _LockTable()


def _with_seq(event: ev.Event, seq: int) -> ev.Event:
    # positional construction: dataclasses.replace is several times slower on this hot path
    return ev.Event(event.event_id, event.execution_id, event.event_type, event.created_at,
                    event.step, event.status, event.payload, event.meta, event.parent_event_id,
                    event.worker_id, seq)  # fmt: skip
