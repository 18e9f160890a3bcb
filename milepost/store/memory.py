"""The in-memory store: `port.Store` on Python dicts, for the engine's unit tests.

It passes the store contract suite (`tests/contract`) like the SQL stores, with the same
projections (`store.projection`: a claim is its `command.claimed` event, applied) and the
same checks (`expect`, `check_claims`, repeated ids). One lock makes every call a
transaction: each checks all it needs before it changes anything. Payloads and meta go
through JSON as on a database, so what comes back is what a database gives back.

Several `MemoryStore`s over one `MemoryDatabase` are several processes on one database.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from milepost.core import events as ev
from milepost.errors import ClaimRefused, ConcurrencyConflict, MilepostError
from milepost.store import approvals, locks, migrations, port, projection, usage
from milepost.store.attempt_logs import LOG_PAGE

SCHEMA_VERSION = len(migrations.scripts("sqlite"))
"""What `migrate` answers: the version the SQL stores are at (there is no schema here)."""


@dataclass
class MemoryDatabase:
    """Everything a database holds, behind one lock."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    logs: dict[int, list[ev.Event]] = field(default_factory=dict)
    by_id: dict[int, ev.Event] = field(default_factory=dict)
    executions: dict[int, port.ExecutionRow] = field(default_factory=dict)
    commands: dict[int, port.CommandRow] = field(default_factory=dict)
    approvals: dict[int, port.ApprovalRow] = field(default_factory=dict)
    usage: dict[usage.Key, list[float]] = field(default_factory=dict)
    leases: dict[int, float] = field(default_factory=dict)
    """command id -> its own lease (`spec.liveness`), the SQL stores' `command.lease_s`."""
    stalls: dict[int, float] = field(default_factory=dict)
    """execution id -> its `stall_after`, the SQL stores' `execution.stall_after`."""
    restarts: dict[int, int] = field(default_factory=dict)
    """execution id -> the run it restarts, the SQL stores' `execution.restarted_from`."""
    claimed_at: dict[int, float] = field(default_factory=dict)
    """command id -> when its live claim was taken, the SQL stores' `command.claimed_at`."""
    snapshots: dict[int, tuple[int, bytes]] = field(default_factory=dict)
    catalog: dict[str, list[port.CatalogEntry]] = field(default_factory=dict)
    blobs: dict[int, tuple[int, bytes]] = field(default_factory=dict)
    blob_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    credentials: dict[str, port.CredentialRow] = field(default_factory=dict)
    tokens: dict[str, port.TokenRow] = field(default_factory=dict)
    machines: dict[int, port.MachineLease] = field(default_factory=dict)
    drivers: dict[int, port.DriverLease] = field(default_factory=dict)
    attempt_logs: dict[tuple[int, str], port.LogRow] = field(default_factory=dict)
    """(event_id, stream) -> its entry, in `log_id` order (the SQL stores' `attempt_log`)."""
    workers: dict[str, port.WorkerRow] = field(default_factory=dict)


def _as_stored(event: ev.Event, seq: int) -> ev.Event:
    # what a database gives back: JSON's types (string keys, lists for tuples)
    payload = ev.jsonable(event.payload)
    meta = ev.jsonable(event.meta) if event.meta else {}
    return dataclasses.replace(event, payload=payload, meta=meta, seq=seq)


class MemoryStore(port.Appends):
    """Implements `port.Store` in memory; `MemoryStore(db)` shares `db` with others."""

    def __init__(self, db: MemoryDatabase | None = None) -> None:
        self.db = db or MemoryDatabase()

    def migrate(self) -> int:
        return SCHEMA_VERSION

    def schema_version(self) -> int:
        return SCHEMA_VERSION

    def close(self) -> None:
        pass

    # -- events ----------------------------------------------------------------------------

    def append_and_claim(
        self,
        events: Sequence[ev.Event],
        claim: port.ClaimRequest | None,
        *,
        expect: Mapping[int, int] | None = None,
        check_claims: bool = False,
    ) -> tuple[list[ev.Event], port.Claimed]:
        db = self.db
        with db.lock:
            claims = port.fences(events, check_claims)
            if claims:
                rows = {cid: db.commands.get(cid) for cid in claims}
                if any(
                    (r := rows[cid]) is None or not fence.holds(r.status, r.epoch)
                    for cid, fence in claims.items()
                ):
                    raise port.ClaimMoved(
                        "a reported claim is no longer live",
                        command_ids=sorted(str(c) for c in claims),
                    )
            for xid in {e.execution_id for e in events} & (expect or {}).keys():
                assert expect is not None
                if any(
                    e.seq > expect[xid] and e.event_type not in ev.CLAIM_EVENTS
                    for e in db.logs.get(xid, ())
                ):
                    raise port.LogMoved(
                        "another writer appended to this execution first", execution_ids=[str(xid)]
                    )
            known = {e.event_id: db.by_id[e.event_id] for e in events if e.event_id in db.by_id}
            fresh = port.new_events(events, known)
            change = projection.changes(fresh)
            clash = [c[0] for c in change.issued if c[0] in db.commands]
            if clash:
                raise ConcurrencyConflict(f"command {clash[0]} exists", constraint="command_pkey")
            stored = self._log(fresh)
            db.leases.update((cid, lease_s) for lease_s, cid in change.leases)
            db.stalls.update((xid, stall) for stall, xid in change.stalls)
            db.restarts.update((xid, old) for old, xid in change.restarts)
            projection.apply(change, db.executions, db.commands, db.approvals, db.usage)
            claimed = self._claim_next(claim) if claim is not None and claim.limit > 0 else []
            return stored, claimed

    def _log(self, events: Sequence[ev.Event]) -> list[ev.Event]:
        stored = []
        for event in events:
            log = self.db.logs.setdefault(event.execution_id, [])
            kept = _as_stored(event, len(log) + 1)
            log.append(kept)
            self.db.by_id[kept.event_id] = kept
            stored.append(kept)
        return stored

    def _take(self, events: list[ev.Event]) -> list[ev.Event]:
        """Log the store's own events (claims, releases) and apply them."""
        logged = self._log(events)
        change = projection.changes(logged)
        self.db.claimed_at.update((claim[0], claim[4]) for claim in change.claimed)
        projection.apply(change, self.db.executions, self.db.commands, self.db.approvals)
        return logged

    def load(
        self,
        execution_id: int,
        after_seq: int = 0,
        *,
        before_seq: int | None = None,
        limit: int | None = None,
    ) -> list[ev.Event]:
        with self.db.lock:
            found = [
                e
                for e in self.db.logs.get(execution_id, ())
                if after_seq < e.seq and (before_seq is None or e.seq < before_seq)
            ]
        return found if limit is None else found[:limit]

    def event_count(self, execution_id: int) -> int:
        with self.db.lock:
            return len(self.db.logs.get(execution_id, ()))

    # -- executions ------------------------------------------------------------------------

    def get_execution(self, execution_id: int) -> port.ExecutionRow | None:
        return self.db.executions.get(execution_id)

    def list_executions(
        self,
        *,
        status: str | None = None,
        path: str | None = None,
        limit: int = 100,
        offset: int = 0,
        since: float | None = None,
        before: port.Keyset | None = None,
    ) -> list[port.ExecutionRow]:
        with self.db.lock:
            rows = [
                r
                for r in self.db.executions.values()
                if (not status or r.status == status.upper())
                and (not path or r.path == path)
                and (since is None or r.created_at >= since)
                and (before is None or (r.created_at, r.execution_id) < before)
            ]
        rows.sort(key=lambda r: (r.created_at, r.execution_id), reverse=True)
        return rows[offset : offset + limit]

    def steps_exited(self, execution_ids: Sequence[int]) -> dict[int, int]:
        with self.db.lock:
            found = {
                x: {e.step for e in self.db.logs.get(x, ()) if e.event_type == ev.STEP_EXIT}
                for x in execution_ids
            }
        return {x: len(steps) for x, steps in found.items() if steps}

    def changed_executions(self, after: port.Keyset, limit: int) -> list[port.ExecutionRow]:
        with self.db.lock:
            rows = [
                r for r in self.db.executions.values() if (r.updated_at, r.execution_id) > after
            ]
        rows.sort(key=lambda r: (r.updated_at, r.execution_id))
        return rows[:limit]

    # -- usage -----------------------------------------------------------------------------

    def execution_usage(self, execution_id: int) -> list[usage.UsageRow]:
        with self.db.lock:
            row = self.db.executions.get(execution_id)
            path = row.path if row is not None else ""
            return [
                usage.UsageRow(path, prov, model, int(v[0]), int(v[1]), float(v[2]), execution_id)
                for (xid, prov, model), v in sorted(self.db.usage.items())
                if xid == execution_id
            ]

    def playbook_usage(self, path: str | None = None) -> list[usage.UsageRow]:
        with self.db.lock:
            xids = sorted({xid for xid, _, _ in self.db.usage})
        return usage.by_playbook([r for x in xids for r in self.execution_usage(x)], path)

    # -- attempt logs ----------------------------------------------------------------------

    def add_attempt_logs(self, rows: Sequence[port.LogRow]) -> int:
        with self.db.lock:
            kept = self.db.attempt_logs
            fresh = [r for r in rows if (r.event_id, r.stream) not in kept]
            for row in fresh:
                kept[row.event_id, row.stream] = dataclasses.replace(row, log_id=len(kept) + 1)
            return len(fresh)

    def attempt_logs(
        self, execution_id: int, *, step: str | None = None, after: int = 0, limit: int = LOG_PAGE
    ) -> list[port.LogRow]:
        with self.db.lock:
            return [
                r
                for r in self.db.attempt_logs.values()
                if r.execution_id == execution_id
                and r.log_id > after
                and (step is None or r.step == step)
            ][:limit]

    # -- approvals -------------------------------------------------------------------------

    def get_approval(self, approval_id: int) -> port.ApprovalRow | None:
        return self.db.approvals.get(approval_id)

    def list_approvals(
        self,
        *,
        status: str | None = None,
        execution_id: int | None = None,
        approver: str | None = None,
        risk: str | None = None,
        limit: int = 100,
        after: int | None = None,
        decided: bool | None = None,
    ) -> list[port.ApprovalRow]:
        with self.db.lock:
            rows = list(self.db.approvals.values())
        return approvals.select(
            rows,
            status=status,
            execution_id=execution_id,
            approver=approver,
            risk=risk,
            limit=limit,
            after=after,
            decided=decided,
        )

    def pending_approvals_by_risk(self) -> dict[str, int]:
        with self.db.lock:
            return approvals.by_risk(self.db.approvals.values())

    # -- commands and claims ---------------------------------------------------------------

    def get_command(self, command_id: int) -> port.CommandRow | None:
        return self.db.commands.get(command_id)

    def get_commands(self, command_ids: Sequence[int]) -> dict[int, port.CommandRow]:
        with self.db.lock:
            return {c: self.db.commands[c] for c in command_ids if c in self.db.commands}

    def open_commands(self, execution_id: int | None = None) -> list[port.CommandRow]:
        with self.db.lock:
            return sorted(
                (
                    r
                    for r in self.db.commands.values()
                    if r.status in (port.COMMAND_QUEUED, port.COMMAND_CLAIMED)
                    and execution_id in (None, r.execution_id)
                ),
                key=lambda r: r.command_id,
            )

    def claim(
        self,
        command_id: int,
        worker_id: str,
        now: float,
        lease_s: float,
        *,
        new_id: Callable[[], int],
    ) -> port.Lease:
        with self.db.lock:
            row = self.db.commands.get(command_id)
            if row is None:
                raise MilepostError(f"unknown command {command_id}", command_id=str(command_id))
            x = self.db.executions.get(row.execution_id)
            held = (row.status, row.worker_id, row.epoch, row.lease_expires_at)
            epoch = port.claim_epoch(
                command_id,
                worker_id,
                now,
                held,
                None if x is None else (x.status, x.cancel_requested),
            )
            lease_s = self.db.leases.get(command_id, lease_s)
            lease = port.Lease(command_id, worker_id, epoch, now + lease_s, lease_s=lease_s)
            self._take(
                [projection.claimed_event(new_id(), row, worker_id, epoch, lease.expires_at, now)]
            )
            return lease

    def heartbeat(
        self, command_id: int, worker_id: str, epoch: int, now: float, lease_s: float
    ) -> port.Lease:
        with self.db.lock:
            row = self._live(command_id, worker_id, epoch)
            lease_s = self.db.leases.get(command_id, lease_s)
            self.db.commands[command_id] = dataclasses.replace(row, lease_expires_at=now + lease_s)
        return port.Lease(command_id, worker_id, epoch, now + lease_s, lease_s=lease_s)

    def _live(self, command_id: int, worker_id: str, epoch: int) -> port.CommandRow:
        row = self.db.commands.get(command_id)
        if row is None or (row.status, row.worker_id, row.epoch) != (
            port.COMMAND_CLAIMED,
            worker_id,
            epoch,
        ):
            raise ClaimRefused(
                "no live claim with that epoch", reason="stale_epoch", command_id=str(command_id)
            )
        return row

    def expired_claims(self, now: float) -> list[port.CommandRow]:
        with self.db.lock:
            return sorted(
                (
                    r
                    for r in self.db.commands.values()
                    if r.status == port.COMMAND_CLAIMED and (r.lease_expires_at or 0) < now
                ),
                key=lambda r: r.command_id,
            )

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
        with self.db.lock:
            return self._claim_next(
                port.ClaimRequest(worker_id, now, lease_s, limit, pool, new_id=new_id)
            )

    def _claim_next(self, req: port.ClaimRequest) -> port.Claimed:
        db = self.db

        def claimable(r: port.CommandRow) -> bool:
            x = db.executions.get(r.execution_id)
            return (
                r.status == port.COMMAND_QUEUED
                and x is not None
                and x.status == "RUNNING"
                and not x.cancel_requested
                and req.pool in (None, r.pool)
                and (
                    req.driver is None
                    or getattr(db.drivers.get(r.execution_id), "holder", None) == req.driver
                )
            )

        rows = sorted(
            filter(claimable, db.commands.values()), key=lambda r: (r.created_at, r.command_id)
        )[: req.limit]
        own = [db.leases.get(r.command_id, req.lease_s) for r in rows]
        # `_take` logs them in this order: each lease gets its numbered `command.claimed`
        logged = self._take(
            [
                projection.claimed_event(
                    req.new_id(), r, req.worker_id, r.epoch + 1, req.now + s, req.now
                )
                for r, s in zip(rows, own, strict=True)
            ]
        )
        return [
            (
                db.commands[r.command_id],
                port.Lease(r.command_id, req.worker_id, r.epoch + 1, req.now + s, e, s),
            )
            for r, s, e in zip(rows, own, logged, strict=True)
        ]

    def release(
        self, command_id: int, worker_id: str, epoch: int, now: float, *, new_id: Callable[[], int]
    ) -> bool:
        with self.db.lock:
            row = self._live(command_id, worker_id, epoch)
            self._take([projection.released_event(new_id(), row, worker_id, epoch, now)])
        return True

    def overdue_claims(self, now: float, after_s: float) -> list[port.CommandRow]:
        with self.db.lock:
            return sorted(
                (
                    r
                    for r in self.db.commands.values()
                    if r.status == port.COMMAND_CLAIMED
                    and self.db.claimed_at.get(r.command_id, now) < now - after_s
                ),
                key=lambda r: r.command_id,
            )

    def running_children(self, execution_id: int) -> list[int]:
        with self.db.lock:
            return sorted(
                r.execution_id
                for r in self.db.executions.values()
                if r.parent_execution_id == execution_id and r.status == "RUNNING"
            )

    def stalled_executions(self, now: float) -> list[tuple[int, float]]:
        with self.db.lock:
            out = []
            for xid, stall in sorted(self.db.stalls.items()):
                row, log = self.db.executions.get(xid), self.db.logs.get(xid)
                last = log[-1].created_at if log else (row.updated_at if row else now)
                if row is not None and row.status == "RUNNING" and last < now - stall:
                    out.append((xid, last))
            return out

    def last_event_at(self, execution_id: int) -> float | None:
        with self.db.lock:
            log = self.db.logs.get(execution_id)
            return log[-1].created_at if log else None

    def restarts_of(self, execution_id: int) -> list[int]:
        with self.db.lock:
            return sorted(x for x, old in self.db.restarts.items() if old == execution_id)

    def executions_to_redrive(self, now: float, idle_s: float = 5.0) -> list[int]:
        with self.db.lock:
            busy = {
                r.execution_id
                for r in self.db.commands.values()
                if r.status in (port.COMMAND_QUEUED, port.COMMAND_CLAIMED)
            }
            # a run waiting for people is idle on purpose, until its approval expires
            busy |= {
                a.execution_id
                for a in self.db.approvals.values()
                if a.status == approvals.PENDING and (a.expires_at is None or a.expires_at > now)
            }
            out = []
            for xid, row in self.db.executions.items():
                log = self.db.logs.get(xid)
                last = log[-1].created_at if log else row.updated_at
                if row.status == "RUNNING" and xid not in busy and last < now - idle_s:
                    out.append(xid)
        return sorted(out)

    def lock_execution(self, execution_id: int) -> contextlib.AbstractContextManager[None]:
        """In-process, per (database, execution): there is no other process to exclude."""
        return locks.EXECUTION_LOCKS.hold((id(self.db), execution_id))

    # -- snapshots, catalog, results -------------------------------------------------------

    def save_snapshot(self, execution_id: int, seq: int, data: bytes) -> None:
        with self.db.lock:
            held = self.db.snapshots.get(execution_id)
            if held is None or seq > held[0]:
                self.db.snapshots[execution_id] = (seq, bytes(data))

    def load_snapshot(self, execution_id: int) -> tuple[int, bytes] | None:
        return self.db.snapshots.get(execution_id)

    def register_playbook(self, path: str, content: str, now: float) -> port.CatalogEntry:
        with self.db.lock:
            versions = self.db.catalog.setdefault(path, [])
            if versions and versions[-1].content == content:
                return versions[-1]
            entry = port.CatalogEntry(path, len(versions) + 1, content, now)
            versions.append(entry)
            return entry

    def get_playbook(self, path: str, version: int | None = None) -> port.CatalogEntry | None:
        with self.db.lock:
            versions = self.db.catalog.get(path, [])
            if version is None:
                return versions[-1] if versions else None
            return versions[version - 1] if 0 < version <= len(versions) else None

    def list_playbooks(self) -> list[port.CatalogEntry]:
        with self.db.lock:
            return [e for path in sorted(self.db.catalog) for e in self.db.catalog[path]]

    def put_blob(self, execution_id: int, data: bytes, now: float) -> str:
        with self.db.lock:
            blob_id = next(self.db.blob_ids)
            self.db.blobs[blob_id] = (execution_id, bytes(data))
        return f"{port.BLOB_PREFIX}{execution_id}/{blob_id}"

    def get_blob(self, uri: str) -> bytes:
        xid, blob_id = port.parse_blob_uri(uri)
        held = self.db.blobs.get(blob_id)
        if held is None or (xid is not None and held[0] != xid):
            raise MilepostError(f"unknown result reference {uri!r}", uri=uri)
        return held[1]

    # -- credentials and tokens ------------------------------------------------------------

    def put_credential(
        self, name: str, type: str, ciphertext: bytes, now: float
    ) -> port.CredentialRow:
        with self.db.lock:
            old = self.db.credentials.get(name)
            row = port.CredentialRow(
                name, type, bytes(ciphertext), now if old is None else old.created_at, now
            )
            self.db.credentials[name] = row
            return row

    def get_credential(self, name: str) -> port.CredentialRow | None:
        return self.db.credentials.get(name)

    def list_credentials(self) -> list[port.CredentialRow]:
        with self.db.lock:
            return [
                dataclasses.replace(self.db.credentials[n], ciphertext=None)
                for n in sorted(self.db.credentials)
            ]

    def delete_credential(self, name: str) -> bool:
        with self.db.lock:
            return self.db.credentials.pop(name, None) is not None

    def create_token(
        self,
        token_hash: str,
        role: str,
        name: str | None,
        now: float,
        *,
        user: str | None = None,
        approver_roles: Sequence[str] = (),
    ) -> port.TokenRow:
        with self.db.lock:
            if token_hash in self.db.tokens:
                raise ConcurrencyConflict("a token with that hash exists", constraint="token")
            row = self.db.tokens[token_hash] = port.TokenRow(
                token_hash, role, name, now, user, tuple(approver_roles)
            )
            return row

    def get_token(self, token_hash: str) -> port.TokenRow | None:
        return self.db.tokens.get(token_hash)

    def list_tokens(self) -> list[port.TokenRow]:
        with self.db.lock:
            return sorted(self.db.tokens.values(), key=lambda r: (r.created_at, r.token_hash))

    def delete_token(self, token_hash: str) -> bool:
        with self.db.lock:
            return self.db.tokens.pop(token_hash, None) is not None

    # -- machine ids and driver leases -----------------------------------------------------

    def lease_machine_id(
        self,
        holder: str,
        now: float,
        ttl: float,
        *,
        owner: str | None = None,
        want: int | None = None,
    ) -> int:
        with self.db.lock:
            machine_id = port.pick_machine_id(self.db.machines.values(), holder, owner, now, want)
            self.db.machines[machine_id] = port.MachineLease(
                machine_id, holder, owner, now, now + ttl
            )
            return machine_id

    def renew_machine_id(
        self, machine_id: int, holder: str, now: float, ttl: float, *, owner: str | None = None
    ) -> bool:
        with self.db.lock:
            row = self.db.machines.get(machine_id)
            if row is None or (row.holder, row.owner or "") != (holder, owner or ""):
                return False
            self.db.machines[machine_id] = dataclasses.replace(row, expires_at=now + ttl)
            return True

    def release_machine_id(
        self, machine_id: int, holder: str, now: float, *, owner: str | None = None
    ) -> bool:
        with self.db.lock:
            row = self.db.machines.get(machine_id)
            if row is None or (row.holder, row.owner or "") != (holder, owner or ""):
                return False
            if row.expires_at <= now:
                return False
            self.db.machines[machine_id] = dataclasses.replace(row, expires_at=now)
            return True

    def machine_leases(self) -> list[port.MachineLease]:
        with self.db.lock:
            return sorted(self.db.machines.values(), key=lambda r: r.machine_id)

    # -- the workers registry --------------------------------------------------------------

    def record_worker(self, row: port.WorkerRow) -> port.WorkerRow:
        with self.db.lock:
            held = self.db.workers.get(row.worker_key)
            port.check_bound(
                row, [r for r in self.db.workers.values() if r.name == row.name or r is held]
            )
            started = row.started_at if held is None else held.started_at
            stored = dataclasses.replace(row, started_at=started, lost_at=None)
            self.db.workers[row.worker_key] = stored
            return stored

    def list_workers(self) -> list[port.WorkerRow]:
        with self.db.lock:
            return sorted(self.db.workers.values(), key=lambda r: (r.name, r.worker_key))

    def mark_lost_workers(self, now: float) -> list[port.WorkerRow]:
        with self.db.lock:
            lost = [
                r for r in self.list_workers() if r.lost_at is None and r.last_seen + r.ttl <= now
            ]
            for row in lost:
                self.db.workers[row.worker_key] = dataclasses.replace(row, lost_at=now)
            return lost

    def forget_workers(
        self,
        *,
        worker_key: str | None = None,
        seen_before: float | None = None,
        owner: str | None = None,
    ) -> int:
        with self.db.lock:
            gone = [
                k
                for k, r in self.db.workers.items()
                if (k == worker_key and (r.owner or "") == (owner or ""))
                or (seen_before is not None and r.last_seen < seen_before)
            ]
            for key in gone:
                del self.db.workers[key]
            return len(gone)

    def acquire_driver(
        self, execution_id: int, holder: str, now: float, ttl: float, *, replace: str | None = None
    ) -> port.DriverLease:
        with self.db.lock:
            held = self.db.drivers.get(execution_id)
            if held is not None and held.holder not in (holder, replace) and held.expires_at > now:
                raise port.DriverBusy(held)
            lease = self.db.drivers[execution_id] = port.DriverLease(
                execution_id, holder, now + ttl
            )
            return lease

    def renew_driver(self, execution_id: int, holder: str, now: float, ttl: float) -> bool:
        with self.db.lock:
            held = self.db.drivers.get(execution_id)
            if held is None or held.holder != holder:
                return False
            self.db.drivers[execution_id] = dataclasses.replace(held, expires_at=now + ttl)
            return True

    def release_driver(self, execution_id: int, holder: str, now: float) -> bool:
        with self.db.lock:
            held = self.db.drivers.get(execution_id)
            if held is None or held.holder != holder:
                return False
            self.db.drivers[execution_id] = dataclasses.replace(
                held, expires_at=min(held.expires_at, now)
            )
            return True

    def get_driver(self, execution_id: int) -> port.DriverLease | None:
        return self.db.drivers.get(execution_id)
