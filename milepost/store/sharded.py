"""Executions spread over several stores (`MILEPOST_DATABASE_URLS`), one `port.Store`.

Placement: execution `x` lives on `stores[shard_of(x, n)]`, where `shard_of` mixes the
64-bit id (the splitmix64 finalizer) and takes it modulo `n`. Plain `x % n` would not
spread snowflakes: their low bits are the per-millisecond sequence, almost always 0, so
nearly every execution would land on shard 0. Everything of an execution (events,
projections, snapshots, result blobs) is on its shard, so per-execution guarantees (one
transaction per append, seq without gaps, claims) are the shard's own. The rule depends
on `n` and the order of the URLs: changing either moves executions, so a deployment
keeps both fixed (there is no rebalancing).

The catalog, credentials and tokens live on the first store. A batch of events for
executions on different shards is one transaction per shard, not one in all.
Commands are found by asking every shard (a command id does not name its execution).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Mapping, Sequence

from milepost.core import events as ev
from milepost.errors import MilepostError
from milepost.store import approvals, port, usage
from milepost.store.attempt_logs import LOG_PAGE

_MASK64 = (1 << 64) - 1


def shard_of(execution_id: int, n: int) -> int:
    """The index of the store that holds `execution_id` among `n` (stable forever)."""
    z = execution_id & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) % n


class ShardedStore:
    """Implements `port.Store` over `stores` (at least one); it owns and closes them."""

    def __init__(self, stores: Sequence[port.Store]) -> None:
        if not stores:
            raise MilepostError("a sharded store needs at least one store")
        self.stores: list[port.Store] = list(stores)
        self.first = self.stores[0]
        self._turn = itertools.count()
        self._turn_lock = threading.Lock()

    def shard(self, execution_id: int) -> port.Store:
        return self.stores[shard_of(execution_id, len(self.stores))]

    def close(self) -> None:
        for store in self.stores:
            store.close()

    def migrate(self) -> int:
        return min(store.migrate() for store in self.stores)

    def schema_version(self) -> int:
        return min(store.schema_version() for store in self.stores)

    # -- events ----------------------------------------------------------------------------

    def append(
        self,
        events: Sequence[ev.Event],
        *,
        expect: Mapping[int, int] | None = None,
        check_claims: bool = False,
    ) -> list[ev.Event]:
        by_shard: dict[int, list[ev.Event]] = {}
        n = len(self.stores)
        for event in events:
            by_shard.setdefault(shard_of(event.execution_id, n), []).append(event)
        # one transaction per shard, each checking its own reports' claims: a claim that
        # moved on a later shard raises ClaimMoved after the earlier ones committed, like any
        # failure there. The caller's careful retry finds those events in the log (and
        # their claims settled), so nothing is decided twice.
        stored: dict[int, ev.Event] = {}
        for index in sorted(by_shard):
            for event in self.stores[index].append(
                by_shard[index], expect=expect, check_claims=check_claims
            ):
                stored[event.event_id] = event
        # in the caller's order, as a single store returns them
        return [stored.pop(e.event_id) for e in events if e.event_id in stored]

    def append_and_claim(
        self,
        events: Sequence[ev.Event],
        claim: port.ClaimRequest | None,
        *,
        expect: Mapping[int, int] | None = None,
        check_claims: bool = False,
    ) -> tuple[list[ev.Event], port.Claimed]:
        """Events of one shard: one transaction there, claiming that shard's commands (the
        other shards' are announced and polled as usual). Across shards the claim is its own
        rotating step."""
        shards = {shard_of(e.execution_id, len(self.stores)) for e in events}
        if len(shards) == 1:
            return self.stores[shards.pop()].append_and_claim(
                events, claim, expect=expect, check_claims=check_claims
            )
        stored = self.append(events, expect=expect, check_claims=check_claims)
        if claim is None:
            return stored, []
        return stored, self.claim_next(
            claim.worker_id, claim.now, claim.lease_s, claim.limit, claim.pool, new_id=claim.new_id
        )

    def load(
        self,
        execution_id: int,
        after_seq: int = 0,
        *,
        before_seq: int | None = None,
        limit: int | None = None,
    ) -> list[ev.Event]:
        return self.shard(execution_id).load(
            execution_id, after_seq, before_seq=before_seq, limit=limit
        )

    def event_count(self, execution_id: int) -> int:
        return self.shard(execution_id).event_count(execution_id)

    # -- executions ------------------------------------------------------------------------

    def get_execution(self, execution_id: int) -> port.ExecutionRow | None:
        return self.shard(execution_id).get_execution(execution_id)

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
        # every shard's first offset+limit rows hold the merged page
        rows: list[port.ExecutionRow] = []
        for store in self.stores:
            rows.extend(
                store.list_executions(
                    status=status,
                    path=path,
                    limit=offset + limit,
                    offset=0,
                    since=since,
                    before=before,
                )
            )
        rows.sort(key=lambda r: (r.created_at, r.execution_id), reverse=True)
        return rows[offset : offset + limit]

    def steps_exited(self, execution_ids: Sequence[int]) -> dict[int, int]:
        by_shard: dict[int, list[int]] = {}
        for xid in execution_ids:
            by_shard.setdefault(shard_of(xid, len(self.stores)), []).append(xid)
        return {
            x: n
            for i, part in by_shard.items()
            for x, n in self.stores[i].steps_exited(part).items()
        }

    def changed_executions(self, after: port.Keyset, limit: int) -> list[port.ExecutionRow]:
        rows = [r for store in self.stores for r in store.changed_executions(after, limit)]
        rows.sort(key=lambda r: (r.updated_at, r.execution_id))
        return rows[:limit]

    # -- attempt logs: each execution's on its shard ------------------------------------------

    def add_attempt_logs(self, rows: Sequence[port.LogRow]) -> int:
        by_shard: dict[int, list[port.LogRow]] = {}
        for row in rows:
            by_shard.setdefault(shard_of(row.execution_id, len(self.stores)), []).append(row)
        return sum(self.stores[i].add_attempt_logs(part) for i, part in by_shard.items())

    def attempt_logs(
        self, execution_id: int, *, step: str | None = None, after: int = 0, limit: int = LOG_PAGE
    ) -> list[port.LogRow]:
        return self.shard(execution_id).attempt_logs(
            execution_id, step=step, after=after, limit=limit
        )

    # -- usage: each execution's on its shard -------------------------------------------------

    def execution_usage(self, execution_id: int) -> list[usage.UsageRow]:
        return self.shard(execution_id).execution_usage(execution_id)

    def playbook_usage(self, path: str | None = None) -> list[usage.UsageRow]:
        return usage.by_playbook([r for s in self.stores for r in s.playbook_usage(path)])

    # -- approvals: each on its execution's shard --------------------------------------------

    def get_approval(self, approval_id: int) -> port.ApprovalRow | None:
        for store in self.stores:  # an approval id does not name its shard: ask each
            row = store.get_approval(approval_id)
            if row is not None:
                return row
        return None

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
        shards = self.stores if execution_id is None else [self.shard(execution_id)]
        # every shard's first page, merged: the first `limit` of all are among them
        return approvals.merged(
            [
                s.list_approvals(
                    status=status,
                    execution_id=execution_id,
                    approver=approver,
                    risk=risk,
                    limit=limit,
                    after=after,
                    decided=decided,
                )
                for s in shards
            ],
            limit,
        )

    def pending_approvals_by_risk(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for store in self.stores:
            for risk, n in store.pending_approvals_by_risk().items():
                out[risk] = out.get(risk, 0) + n
        return out

    # -- commands --------------------------------------------------------------------------

    def _find_command(self, command_id: int) -> tuple[port.Store, port.CommandRow] | None:
        for store in self.stores:  # a command id does not name its shard: ask each
            row = store.get_command(command_id)
            if row is not None:
                return store, row
        return None

    def _shard_of_command(self, command_id: int) -> port.Store | None:
        found = self._find_command(command_id)
        return None if found is None else found[0]

    def get_commands(self, command_ids: Sequence[int]) -> dict[int, port.CommandRow]:
        found: dict[int, port.CommandRow] = {}
        for store in self.stores:  # a command id does not name its shard: ask each
            missing = [c for c in command_ids if c not in found]
            if not missing:
                break
            found.update(store.get_commands(missing))
        return found

    def get_command(self, command_id: int) -> port.CommandRow | None:
        found = self._find_command(command_id)
        return None if found is None else found[1]

    def open_commands(self, execution_id: int | None = None) -> list[port.CommandRow]:
        if execution_id is not None:
            return self.shard(execution_id).open_commands(execution_id)
        rows = [c for store in self.stores for c in store.open_commands()]
        return sorted(rows, key=lambda c: c.command_id)

    def claim(
        self,
        command_id: int,
        worker_id: str,
        now: float,
        lease_s: float,
        *,
        new_id: Callable[[], int],
    ) -> port.Lease:
        store = self._shard_of_command(command_id)
        if store is None:
            raise MilepostError(f"unknown command {command_id}", command_id=str(command_id))
        return store.claim(command_id, worker_id, now, lease_s, new_id=new_id)

    def heartbeat(
        self, command_id: int, worker_id: str, epoch: int, now: float, lease_s: float
    ) -> port.Lease:
        store = self._shard_of_command(command_id) or self.first  # the shard says stale_epoch
        return store.heartbeat(command_id, worker_id, epoch, now, lease_s)

    def expired_claims(self, now: float) -> list[port.CommandRow]:
        rows = [c for store in self.stores for c in store.expired_claims(now)]
        return sorted(rows, key=lambda c: c.command_id)

    def claim_next(
        self,
        worker_id: str,
        now: float,
        lease_s: float,
        limit: int = 1,
        pool: str | None = None,
        *,
        new_id: Callable[[], int],
    ) -> list[tuple[port.CommandRow, port.Lease]]:
        """Shards in rotation: each call starts one shard further, so no shard starves."""
        with self._turn_lock:
            start = next(self._turn)
        n = len(self.stores)
        claimed: list[tuple[port.CommandRow, port.Lease]] = []
        for i in range(n):
            if len(claimed) >= limit:
                break
            store = self.stores[(start + i) % n]
            claimed.extend(
                store.claim_next(worker_id, now, lease_s, limit - len(claimed), pool, new_id=new_id)
            )
        return claimed

    def release(
        self, command_id: int, worker_id: str, epoch: int, now: float, *, new_id: Callable[[], int]
    ) -> bool:
        store = self._shard_of_command(command_id) or self.first  # the shard says stale_epoch
        return store.release(command_id, worker_id, epoch, now, new_id=new_id)

    def lease_machine_id(
        self,
        holder: str,
        now: float,
        ttl: float,
        *,
        owner: str | None = None,
        want: int | None = None,
    ) -> int:
        # one registry of machine ids for every process on these databases: the catalog's
        return self.first.lease_machine_id(holder, now, ttl, owner=owner, want=want)

    def renew_machine_id(
        self, machine_id: int, holder: str, now: float, ttl: float, *, owner: str | None = None
    ) -> bool:
        return self.first.renew_machine_id(machine_id, holder, now, ttl, owner=owner)

    def release_machine_id(
        self, machine_id: int, holder: str, now: float, *, owner: str | None = None
    ) -> bool:
        return self.first.release_machine_id(machine_id, holder, now, owner=owner)

    def machine_leases(self) -> list[port.MachineLease]:
        return self.first.machine_leases()

    # the workers registry: one for every process on these databases, as the machine ids
    def record_worker(self, row: port.WorkerRow) -> port.WorkerRow:
        return self.first.record_worker(row)

    def list_workers(self) -> list[port.WorkerRow]:
        return self.first.list_workers()

    def mark_lost_workers(self, now: float) -> list[port.WorkerRow]:
        return self.first.mark_lost_workers(now)

    def forget_workers(
        self,
        *,
        worker_key: str | None = None,
        seen_before: float | None = None,
        owner: str | None = None,
    ) -> int:
        return self.first.forget_workers(
            worker_key=worker_key, seen_before=seen_before, owner=owner
        )

    def try_leader_lock(self) -> bool:
        """The first store's leader lock; a store without one (SQLite) leads in-process."""
        leader = getattr(self.first, "try_leader_lock", None)
        return True if leader is None else bool(leader())

    def executions_to_redrive(self, now: float, idle_s: float = 5.0) -> list[int]:
        return sorted(x for store in self.stores for x in store.executions_to_redrive(now, idle_s))

    def running_children(self, execution_id: int) -> list[int]:
        # a child is placed by its own id, not its parent's: every shard may hold one
        return sorted(x for store in self.stores for x in store.running_children(execution_id))

    def restarts_of(self, execution_id: int) -> list[int]:
        # a restart is a new run: any shard may hold it (ids are in the order they were made)
        return sorted(x for store in self.stores for x in store.restarts_of(execution_id))

    def stalled_executions(self, now: float) -> list[tuple[int, float]]:
        return sorted(x for store in self.stores for x in store.stalled_executions(now))

    def last_event_at(self, execution_id: int) -> float | None:
        return self.shard(execution_id).last_event_at(execution_id)

    def overdue_claims(self, now: float, after_s: float) -> list[port.CommandRow]:
        rows = [c for store in self.stores for c in store.overdue_claims(now, after_s)]
        return sorted(rows, key=lambda c: c.command_id)

    def lock_execution(self, execution_id: int) -> contextlib.AbstractContextManager[None]:
        return self.shard(execution_id).lock_execution(execution_id)

    # -- snapshots and results: on the execution's shard ----------------------------------

    def save_snapshot(self, execution_id: int, seq: int, data: bytes) -> None:
        self.shard(execution_id).save_snapshot(execution_id, seq, data)

    def load_snapshot(self, execution_id: int) -> tuple[int, bytes] | None:
        return self.shard(execution_id).load_snapshot(execution_id)

    def put_blob(self, execution_id: int, data: bytes, now: float) -> str:
        return self.shard(execution_id).put_blob(execution_id, data, now)

    def get_blob(self, uri: str) -> bytes:
        xid, _ = port.parse_blob_uri(uri)
        if xid is not None:
            return self.shard(xid).get_blob(uri)
        # the old `<blob_id>` form (SQLite's, before it named the execution) does not name
        # its shard: the first that has it
        for store in self.stores:
            with contextlib.suppress(MilepostError):
                return store.get_blob(uri)
        raise MilepostError(f"unknown result reference {uri!r}", uri=uri)

    # -- on the first store: catalog, credentials, tokens ----------------------------------

    def register_playbook(self, path: str, content: str, now: float) -> port.CatalogEntry:
        return self.first.register_playbook(path, content, now)

    def get_playbook(self, path: str, version: int | None = None) -> port.CatalogEntry | None:
        return self.first.get_playbook(path, version)

    def list_playbooks(self) -> list[port.CatalogEntry]:
        return self.first.list_playbooks()

    def put_credential(
        self, name: str, type: str, ciphertext: bytes, now: float
    ) -> port.CredentialRow:
        return self.first.put_credential(name, type, ciphertext, now)

    def get_credential(self, name: str) -> port.CredentialRow | None:
        return self.first.get_credential(name)

    def list_credentials(self) -> list[port.CredentialRow]:
        return self.first.list_credentials()

    def delete_credential(self, name: str) -> bool:
        return self.first.delete_credential(name)

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
        return self.first.create_token(
            token_hash, role, name, now, user=user, approver_roles=approver_roles
        )

    def get_token(self, token_hash: str) -> port.TokenRow | None:
        return self.first.get_token(token_hash)

    def list_tokens(self) -> list[port.TokenRow]:
        return self.first.list_tokens()

    def delete_token(self, token_hash: str) -> bool:
        return self.first.delete_token(token_hash)

    # -- the driver of an embedded execution: on the execution's shard --------------------

    def acquire_driver(
        self, execution_id: int, holder: str, now: float, ttl: float, *, replace: str | None = None
    ) -> port.DriverLease:
        return self.shard(execution_id).acquire_driver(
            execution_id, holder, now, ttl, replace=replace
        )

    def renew_driver(self, execution_id: int, holder: str, now: float, ttl: float) -> bool:
        return self.shard(execution_id).renew_driver(execution_id, holder, now, ttl)

    def release_driver(self, execution_id: int, holder: str, now: float) -> bool:
        return self.shard(execution_id).release_driver(execution_id, holder, now)

    def get_driver(self, execution_id: int) -> port.DriverLease | None:
        return self.shard(execution_id).get_driver(execution_id)
