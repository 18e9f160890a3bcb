"""The store port written once for SQL databases; the dialects supply what differs.

`SQLStore` implements `port.Store` over hooks (`Dialect`, below): connections and
transactions, placeholders, how writers of one log are serialized, batch inserts, the
claim query and error classification. Everything else is here: the append retry loop,
seq numbering, the `expect` and claim checks, the projections (`store.projection`, a pure
function of events), claims as events, catalog, credentials, tokens, blobs, snapshots,
machine-id and driver leases. Shared statements are written with `?` placeholders; a
dialect's `sql` turns them into its own.

Numbering: events get `max(seq) + 1` of their execution, read with the log's writers held
off (`lock_key`). An append whose caller vouches for the log (`expect` covers it) reads
nothing first: it numbers from `expect`, or from `SeqCache` (the last seq this store
committed and the last one that may change a decision: claims may have come after the
caller's watermark). Another writer may have moved the log since: the unique
(execution_id, seq) index refuses the insert (`SeqTaken`) and the retry reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from milepost.core import events as ev
from milepost.errors import ClaimRefused, ConcurrencyConflict, MilepostError
from milepost.store import approval_table, liveness, port, projection, usage_table, worker_table
from milepost.store.approval_table import ApprovalTable
from milepost.store.attempt_log_table import AttemptLogTable
from milepost.store.children_table import ChildrenTable
from milepost.store.execution_table import ExecutionTable
from milepost.store.liveness import LivenessTable
from milepost.store.restarts import RestartTable
from milepost.store.seqs import SeqCache
from milepost.store.tables import CMD_COLS as CMD_COLS  # the dialects read sql.CMD_COLS
from milepost.store.tables import OPEN as OPEN  # named by migration 6

Conn = Any
"""A dialect's connection: `execute(sql, params)` returns a cursor (`fetchone`,
`fetchall`, `rowcount`)."""

EVENT_COLS = (
    "seq, event_id, execution_id, parent_event_id, event_type, step, status, result,"
    " meta, worker_id, created_at"
)
DRIVEN_BY = (
    "EXISTS (SELECT 1 FROM execution_driver d WHERE d.execution_id = c.execution_id"
    " AND d.holder = ?)"
)
"""The claim filter of `ClaimRequest.driver` (a key lookup per queued command)."""

TRIES = 4
"""Appends tried before the log is said to keep moving (each retry reads what it trusted)."""

NS_APPEND = 0x6D70_0002
"""The namespace of the keys appenders are serialized on (`lock_key`)."""

_REDRIVE = (
    "SELECT x.execution_id FROM execution x WHERE x.status='RUNNING'"
    " AND NOT EXISTS (SELECT 1 FROM command c WHERE c.execution_id = x.execution_id"
    f" AND c.{OPEN}) AND NOT {approval_table.WAITING}"
    f" AND {liveness.LAST_AT} < ?"
    " ORDER BY x.execution_id"
)
_SETTLE = "UPDATE command SET status=?, updated_at=? WHERE command_id=?"
_NONE: Mapping[int, port.Fence] = {}
_DECIDED_AFTER = (
    "SELECT 1 FROM event WHERE execution_id=? AND seq>? AND event_type NOT IN"
    f" ({','.join('?' * len(ev.CLAIM_EVENTS))}) LIMIT 1"
)


class SeqTaken(ConcurrencyConflict):
    """Another writer took a seq this append numbered from what it trusted: read, retry.
    (Its code stays `concurrency_conflict`: should it ever escape, it is a 409.)"""


class RepeatedId(Exception):
    """An event id of the append was already in the log: retry leaving out the known ids."""


class SQLStore(
    ApprovalTable,
    usage_table.UsageTable,
    worker_table.WorkerTable,
    LivenessTable,
    AttemptLogTable,
    ChildrenTable,
    ExecutionTable,
    RestartTable,
    port.Appends,
):
    """`port.Store` on a SQL database; a subclass is a dialect (see the hooks below)."""

    def __init__(self) -> None:
        self.seqs = SeqCache()

    # -- the dialect's hooks (and those of `Tables`) ----------------------------------------

    def write_batch(
        self,
        events: Sequence[ev.Event],
        claim: port.ClaimRequest | None,
        expect: Mapping[int, int] | None,
        claims: Mapping[int, port.Fence],
        careful: bool,
    ) -> tuple[list[ev.Event], port.Claimed, list[ev.Event]]:
        """One try of `append_and_claim` in one transaction: the claim check (`claims`:
        command -> what its row must be, `port.fences`), the events (`number_events`, `project`), the claim of `claim`
        with its `command.claimed`; returns the events stored, the claims and their
        events (each claim's `Lease.event` set)."""
        raise NotImplementedError

    def check_claims(self, conn: Conn, claims: Mapping[int, port.Fence]) -> None:
        """Raise ClaimMoved unless every command's row is as its fence requires, holding
        the rows until the commit."""
        if not claims:
            return
        rows = conn.execute(
            self.sql(
                "SELECT command_id, status, epoch FROM command"
                f" WHERE command_id IN ({_marks(claims)}){self.for_update('')}"
            ),
            tuple(claims),
        ).fetchall()
        live = {int(r[0]): (str(r[1]), int(r[2])) for r in rows}
        if any(cid not in live or not f.holds(*live[cid]) for cid, f in claims.items()):
            raise _moved(claims)

    def for_update(self, of: str) -> str:
        """The row-lock clause of a SELECT (`of`: the table alias), if the dialect has one."""
        return ""

    def insert_rows(
        self, conn: Conn, rows: list[tuple[Any, ...]], strict: bool
    ) -> Callable[[], int]:
        """Queue the insert of event rows (`ON CONFLICT (event_id) DO NOTHING` unless
        `strict`); the call returns how many were inserted."""
        raise NotImplementedError

    def insert_commands(self, conn: Conn, rows: list[tuple[Any, ...]]) -> None:
        self.many(
            conn,
            (
                "INSERT INTO command (command_id, execution_id, step, run, idx, attempt,"
                " idempotency_key, status, pool, created_at, updated_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)"
            ),
            rows,
        )

    def settle_commands(
        self, conn: Conn, rows: list[tuple[str, float, int]], claims: Mapping[int, port.Fence]
    ) -> None:
        """Settle the commands; those of `claims` only while their rows are as their fences
        require (its row count tells: no read first), the rest of `claims` checked too."""
        checked: dict[int, tuple[Any, ...]] = {}
        plain = []
        for status, at, cid in rows:
            if cid in claims and cid not in checked:
                fence = claims[cid]
                also = port.COMMAND_QUEUED if fence.open else port.COMMAND_CLAIMED
                checked[cid] = (status, at, cid, port.COMMAND_CLAIMED, also, fence.epoch)
            else:
                plain.append((status, at, cid))
        if checked and conn.executemany(
            self.sql(_SETTLE + " AND status IN (?,?) AND epoch=?"), list(checked.values())
        ).rowcount != len(checked):
            raise _moved(claims)
        if plain:
            self.many(conn, _SETTLE, plain)
        if len(checked) < len(claims):
            self.check_claims(conn, {c: e for c, e in claims.items() if c not in checked})

    # -- events ----------------------------------------------------------------------------

    def append_and_claim(
        self,
        events: Sequence[ev.Event],
        claim: port.ClaimRequest | None,
        *,
        expect: Mapping[int, int] | None = None,
        check_claims: bool = False,
    ) -> tuple[list[ev.Event], port.Claimed]:
        if claim is not None and claim.limit <= 0:
            claim = None
        if not events and claim is None:
            return [], []
        claims = port.fences(events, check_claims)
        careful = False
        for _ in range(TRIES):
            try:
                stored, claimed, logged = self.write_batch(events, claim, expect, claims, careful)
                self.seqs.committed([*stored, *logged])
                return stored, claimed  # each lease with its event (`write_batch`)
            except (RepeatedId, SeqTaken):
                # what the first try trusted (no repeated ids, the cached seqs) was not so:
                # read the known ids and the seqs under the writers' lock this time
                self.seqs.forget({e.execution_id for e in events})
                careful = True
            except (port.ClaimMoved, port.LogMoved):
                raise
            except ConcurrencyConflict:
                # a repeated event's projection (its command row, say) is already there, or
                # a vouched id was in the log: do it again the careful way, leaving them out
                if careful:
                    raise
                careful = True
        xids = sorted({str(e.execution_id) for e in events})
        if expect:
            raise port.LogMoved(
                "another writer kept appending to these executions", execution_ids=xids
            )
        raise ConcurrencyConflict("could not append: the log kept moving", execution_ids=xids)

    def number_events(
        self,
        conn: Conn,
        events: Sequence[ev.Event],
        expect: Mapping[int, int] | None,
        careful: bool,
        ends: dict[int, int],
        read: bool = False,
    ) -> tuple[list[ev.Event], list[tuple[Any, ...]], bool]:
        """`events` numbered after their logs' ends (`ends` is given where each ends then;
        `read`: read them under the writers' lock, not from the cache), their rows, and
        whether their insert is strict (the caller vouched for the logs)."""
        if not events:
            return [], [], True
        xids = sorted({e.execution_id for e in events})
        vouched = not careful and expect is not None and set(xids) <= expect.keys()
        last = self.last_seqs(conn, xids, expect or {}, careful or read)
        if careful:
            events = port.new_events(events, self._known(conn, events))
        stored = ev.numbered(events, last)
        ends.update(last)
        return stored, [event_row(e, self.encode_result(conn, e)) for e in stored], vouched

    def reads_nothing(
        self, events: Sequence[ev.Event], expect: Mapping[int, int] | None, careful: bool
    ) -> bool:
        """Whether appending `events` reads nothing before its commit: the caller vouched
        for every log (`expect`, a strict insert: nothing to count) and each log's end is
        known without a look (`last_seqs`)."""
        if careful or not events or expect is None:
            return False
        xids = {e.execution_id for e in events}
        return xids <= expect.keys() and not self._trusted_ends(list(xids), expect, False)[1]

    def last_seqs(
        self, conn: Conn, xids: Sequence[int], expect: Mapping[int, int], careful: bool
    ) -> dict[int, int]:
        """The seq each execution's log ends at, and LogMoved where an event that may change
        a decision is past `expect`. Trusted from the cache or `expect` unless `careful`."""
        last, unknown = self._trusted_ends(xids, expect, careful)
        # every writer of a log holds it (the trusted too: a claim reads the log's end),
        # but the one writing a new run's first events: nobody else can write to a log
        # whose run is not committed yet (were it not new, its seq 1 would be refused)
        self.lock_keys(
            conn, NS_APPEND, sorted({fold_key(x) for x in xids if careful or expect.get(x) != 0})
        )
        if unknown:
            rows = conn.execute(
                self.sql(
                    f"SELECT execution_id, max(seq) FROM event WHERE execution_id IN"
                    f" ({_marks(unknown)}) GROUP BY execution_id"
                ),
                unknown,
            ).fetchall()
            last.update({x: 0 for x in unknown})
            last.update((int(x), int(s)) for x, s in rows)
            for xid in unknown:
                seen = expect.get(xid)
                if (
                    seen is not None
                    and last[xid] > seen
                    and conn.execute(
                        self.sql(_DECIDED_AFTER), (xid, seen, *ev.CLAIM_EVENTS)
                    ).fetchone()
                ):
                    raise port.LogMoved(
                        "another writer appended to this execution first", execution_ids=[str(xid)]
                    )
        return last

    def _trusted_ends(
        self, xids: Sequence[int], expect: Mapping[int, int], careful: bool
    ) -> tuple[dict[int, int], list[int]]:
        """The logs' ends known from the cache or `expect` (LogMoved where the cache shows
        a decision past `expect`), and the executions whose end must be read."""
        last: dict[int, int] = {}
        unknown: list[int] = []
        for xid in xids:
            seen = expect.get(xid)
            held = None if careful else self.seqs.get(xid)
            if seen is None and held is not None:
                last[xid] = held.last  # as this store committed it: the index checks it
            elif careful or seen is None or held is not None and held.decided is None:
                unknown.append(xid)
            elif held is None:
                last[xid] = seen  # the caller folded the log to there: the index checks it
            elif held.decided is not None and held.decided > seen:
                raise port.LogMoved(
                    "another writer appended to this execution first", execution_ids=[str(xid)]
                )
            else:
                last[xid] = max(held.last, seen)  # claims may have come after `seen`
        return last, unknown

    def log_events(self, conn: Conn, events: Sequence[ev.Event]) -> list[ev.Event]:
        """Append events the store makes itself (a claim by id, a release: fresh ids, no
        projection) in the caller's transaction, numbered under the writers' lock."""
        last = self.last_seqs(conn, sorted({e.execution_id for e in events}), {}, careful=True)
        stored = ev.numbered(events, last)
        inserted = self.insert_rows(
            conn, [event_row(e, self.encode_result(conn, e)) for e in stored], strict=True
        )
        inserted()
        return stored

    def _known(self, conn: Conn, events: Sequence[ev.Event]) -> dict[int, ev.Event]:
        """The log's events that have the ids of these."""
        ids = list({e.event_id for e in events})
        known: dict[int, ev.Event] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            rows = conn.execute(
                self.sql(f"SELECT {EVENT_COLS} FROM event WHERE event_id IN ({_marks(chunk)})"),
                chunk,
            ).fetchall()
            known.update((int(r[1]), self.decode(r)) for r in rows)
        return known

    def encode_result(self, conn: Conn, event: ev.Event) -> str:
        envelope = event.envelope_result()
        text = ev.to_json(envelope)
        if len(text) <= port.BLOB_THRESHOLD:
            return text
        # large payloads live in the result store; the event keeps a reference that names
        # the execution, so a sharded store finds the database that holds it. The event's
        # id is the blob's: nothing to read back (in a pipeline that would end it early)
        data = json.dumps(event.payload, default=str).encode()
        conn.execute(
            self.sql(
                "INSERT INTO result_blob (blob_id, execution_id, data, created_at) VALUES (?,?,?,?)"
            ),
            (event.event_id, event.execution_id, data, event.created_at),
        )
        ref = {"uri": f"{port.BLOB_PREFIX}{event.execution_id}/{event.event_id}", "size": len(data)}
        return json.dumps({"status": envelope["status"], "reference": ref})

    def project(
        self, conn: Conn, events: Sequence[ev.Event], claims: Mapping[int, port.Fence] = _NONE
    ) -> None:
        """Apply the projection changes of stored events (`projection.changes`); `claims`:
        checked as they settle (`settle_commands`)."""
        change = projection.changes(events)
        if change.started:
            self.many(
                conn,
                (
                    "INSERT INTO execution (execution_id, path, version, status,"
                    " parent_execution_id, created_at, updated_at, started_by) VALUES (?,?,?,?,?,?,?,?)"
                    " ON CONFLICT (execution_id) DO NOTHING"
                ),
                change.started,
            )
        if change.progressed:  # the row moves up the change stream (`projection.Changes`)
            self.many(
                conn,
                "UPDATE execution SET updated_at=? WHERE execution_id=? AND"
                f" status='{projection.RUNNING}' AND updated_at<?",
                change.progressed,
            )
        if change.approvals:  # after `started`: a new approval row shows its run's path
            self.project_approvals(conn, change.approvals)
        flags = [(True, x) for x in change.cancels] + [(False, x) for x in change.finishing]
        if flags:  # finishing after the cancels: its final steps are claimed (DSL 10.5)
            self.many(conn, "UPDATE execution SET cancel_requested=? WHERE execution_id=?", flags)
        if change.issued:
            self.insert_commands(conn, change.issued)
        if change.leases or change.stalls:  # after the rows they set a column of
            self.project_liveness(conn, change)
        if change.restarts:
            self.project_restarts(conn, change.restarts)
        if change.settled or claims:
            self.settle_commands(conn, change.settled, claims)
        self.project_usage(conn, change.usage)
        if change.expired:
            # the attempt is lost; only the claim that lapsed (its epoch), not a newer one
            self.many(
                conn,
                (
                    "UPDATE command SET status=?, updated_at=? WHERE command_id=? AND status=?"
                    " AND (CAST(? AS INTEGER) IS NULL OR epoch=?)"
                ),
                [
                    (port.COMMAND_FAILED, at, cid, port.COMMAND_CLAIMED, epoch, epoch)
                    for at, cid, epoch in change.expired
                ],
            )
        for status, error, at, xid in change.ended:  # after the command rows of the batch
            conn.execute(
                self.sql(
                    "UPDATE execution SET status=?, error=?, updated_at=? WHERE execution_id=?"
                ),
                (status, error, at, xid),
            )
            # whatever was still queued or claimed will never run now
            conn.execute(
                self.sql(
                    f"UPDATE command SET status=?, updated_at=? WHERE execution_id=? AND {OPEN}"
                ),
                (port.COMMAND_CANCELLED, at, xid),
            )
            self.seqs.forget([xid])

    def load(
        self,
        execution_id: int,
        after_seq: int = 0,
        *,
        before_seq: int | None = None,
        limit: int | None = None,
    ) -> list[ev.Event]:
        text = f"SELECT {EVENT_COLS} FROM event WHERE execution_id=? AND seq>?"
        params: list[Any] = [execution_id, after_seq]
        if before_seq is not None:
            text += " AND seq<?"
            params.append(before_seq)
        text += " ORDER BY seq"
        if limit is not None:  # the (execution_id, seq) index stops after `limit` rows
            text += " LIMIT ?"
            params.append(limit)
        return [self.decode(row) for row in self.rows(text, params)]

    def decode(self, row: Sequence[Any]) -> ev.Event:
        seq, event_id, execution_id, parent, etype, step, status, result, meta, worker, at = row
        envelope = json.loads(result) if result else {}
        if "reference" in envelope:
            payload = json.loads(self.get_blob(envelope["reference"]["uri"]))
        else:
            payload = envelope.get("context") or {}
        meta = json.loads(meta) if meta else {}
        return ev.restored(
            seq, event_id, execution_id, parent, etype, step, status, payload, meta, worker, at
        )

    def event_count(self, execution_id: int) -> int:
        return int(
            self.rows("SELECT count(*) FROM event WHERE execution_id=?", (execution_id,))[0][0]
        )

    # -- commands and claims ---------------------------------------------------------------

    def get_commands(self, command_ids: Sequence[int]) -> dict[int, port.CommandRow]:
        ids = list(dict.fromkeys(command_ids))
        if not ids:
            return {}
        rows = self.rows(f"SELECT {CMD_COLS} FROM command WHERE command_id IN ({_marks(ids)})", ids)
        return {int(r[0]): port.CommandRow(*r) for r in rows}

    def get_command(self, command_id: int) -> port.CommandRow | None:
        rows = self.rows(f"SELECT {CMD_COLS} FROM command WHERE command_id=?", (command_id,))
        return port.CommandRow(*rows[0]) if rows else None

    def open_commands(self, execution_id: int | None = None) -> list[port.CommandRow]:
        text = f"SELECT {CMD_COLS} FROM command WHERE {OPEN}"
        params: list[Any] = []
        if execution_id is not None:
            text += " AND execution_id=?"
            params.append(execution_id)
        return [port.CommandRow(*r) for r in self.rows(text + " ORDER BY command_id", params)]

    def claim(
        self,
        command_id: int,
        worker_id: str,
        now: float,
        lease_s: float,
        *,
        new_id: Callable[[], int],
    ) -> port.Lease:
        with self.txn() as conn:
            row = conn.execute(
                self.sql(
                    f"SELECT {prefixed('c.', CMD_COLS)}, x.status, x.cancel_requested, c.lease_s"
                    " FROM command c"
                    " LEFT JOIN execution x ON x.execution_id = c.execution_id WHERE c.command_id=?"
                    f"{self.for_update('c')}"
                ),
                (command_id,),
            ).fetchone()
            if row is None:
                raise MilepostError(f"unknown command {command_id}", command_id=str(command_id))
            command = port.CommandRow(*row[:13])
            execution = None if row[13] is None else (row[13], bool(row[14]))
            held = (command.status, command.worker_id, command.epoch, command.lease_expires_at)
            epoch = port.claim_epoch(command_id, worker_id, now, held, execution)
            lease_s = lease_s if row[15] is None else float(row[15])  # the step's liveness
            lease = port.Lease(command_id, worker_id, epoch, now + lease_s, lease_s=lease_s)
            conn.execute(
                self.sql(
                    "UPDATE command SET status=?, worker_id=?, epoch=?,"
                    " lease_expires_at=?, claimed_at=?, updated_at=?"
                    " WHERE command_id=?"
                ),
                (port.COMMAND_CLAIMED, worker_id, epoch, lease.expires_at, now, now, command_id),
            )
            logged = self.log_events(
                conn,
                [
                    projection.claimed_event(
                        new_id(), command, worker_id, epoch, lease.expires_at, now
                    )
                ],
            )
        self.seqs.committed(logged)
        return lease

    def expired_claims(self, now: float) -> list[port.CommandRow]:
        rows = self.rows(
            f"SELECT {CMD_COLS} FROM command WHERE {OPEN} AND status=? AND"
            " lease_expires_at<? ORDER BY command_id",
            (port.COMMAND_CLAIMED, now),
        )
        return [port.CommandRow(*r) for r in rows]

    def claim_next(
        self,
        worker_id: str,
        now: float,
        lease_s: float,
        limit: int = 1,
        pool: str | None = None,
        *,
        new_id: Callable[[], int],
    ) -> port.Claimed:
        if limit <= 0:
            return []
        return self.append_and_claim(
            [], port.ClaimRequest(worker_id, now, lease_s, limit, pool, new_id=new_id)
        )[1]

    def release(
        self, command_id: int, worker_id: str, epoch: int, now: float, *, new_id: Callable[[], int]
    ) -> bool:
        with self.txn() as conn:
            row = conn.execute(
                self.sql(
                    f"UPDATE command SET status=?, worker_id=NULL, lease_expires_at=NULL,"
                    f" updated_at=? WHERE command_id=? AND status=? AND worker_id=? AND epoch=?"
                    f" RETURNING {CMD_COLS}"
                ),
                (port.COMMAND_QUEUED, now, command_id, port.COMMAND_CLAIMED, worker_id, epoch),
            ).fetchone()
            if row is None:
                raise ClaimRefused(
                    "no live claim with that epoch",
                    reason="stale_epoch",
                    command_id=str(command_id),
                )
            released = projection.released_event(
                new_id(), port.CommandRow(*row), worker_id, epoch, now
            )
            logged = self.log_events(conn, [released])
        self.seqs.committed(logged)
        return True

    def executions_to_redrive(self, now: float, idle_s: float = 5.0) -> list[int]:
        rows = self.rows(_REDRIVE, (now, now - idle_s))
        return [int(r[0]) for r in rows]


def fold_key(execution_id: int) -> int:
    """A 64-bit id folded into a signed 32-bit key (`lock_key`). Two executions that fold
    alike only wait for each other's appends."""
    v = (execution_id ^ (execution_id >> 32)) & 0xFFFFFFFF
    return v - (1 << 32) if v >= (1 << 31) else v


def _moved(claims: Mapping[int, port.Fence]) -> port.ClaimMoved:
    return port.ClaimMoved(
        "a reported claim is no longer live", command_ids=sorted(str(c) for c in claims)
    )


def _marks(values: Sequence[Any] | Mapping[Any, Any]) -> str:
    return ",".join("?" * len(values))


def prefixed(prefix: str, cols: str) -> str:
    return ", ".join(prefix + c.strip() for c in cols.split(","))


def claim_filters(pool: bool, driver: bool, pool_mark: str = "?", driver_mark: str = "?") -> str:
    """The conditions a claim adds to a claimable command `c`: the request's pool and the
    runs its driver holds (`ClaimRequest.pool`, `.driver`), with the dialect's marks."""
    return (f" AND c.pool={pool_mark}" if pool else "") + (
        " AND " + DRIVEN_BY.replace("?", driver_mark) if driver else ""
    )


def event_row(e: ev.Event, result: str) -> tuple[Any, ...]:
    return (
        e.event_id,
        e.execution_id,
        e.seq,
        e.parent_event_id,
        e.event_type,
        e.step,
        e.status,
        result,
        ev.to_json(e.meta) if e.meta else None,
        e.worker_id,
        float(e.created_at),
    )
