"""The workers registry: who runs commands, what each runs now, and who was lost.

A `milepost worker` checks in when it leases its machine id (`POST
/api/workers/machine-id`) and again at each renewal, saying its name, host, pid, version
and ttl; the embedded engine checks its in-process workers in the same way on its driver
keeper's beat (`kind` embedded, pool `default`) and forgets them on a clean exit. No
second heartbeat loop: the traffic that keeps a machine id is what keeps a worker live.

A worker is live while it was seen within its ttl (its lease seconds: a worker that stops
heartbeating is lost when its claims' leases lapse too, and those commands recover through
the reconciler's lease expiry); the status is decided here when read, so the embedded mode
and the server agree without a reconciler. The reconciler's tick (`notice_lost`) logs each
worker it finds lost once, and forgets those lost for `FORGET_AFTER`.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass

from milepost import __version__
from milepost.engine.machine import LEASE_TTL_S as LEASE_TTL_S
from milepost.playbook import pools
from milepost.store import port

log = logging.getLogger(__name__)

LIVE = "live"
LOST = "lost"
STATUSES = (LIVE, LOST)
WORKER = "worker"
"""A `milepost worker` process."""
EMBEDDED = "embedded"
"""The in-process workers of an embedded engine (`milepost run`): they take only the runs
it drives, so they serve no pool of anyone else's."""
FORGET_AFTER = 24 * 3600.0
"""Seconds a lost worker stays listed (workers named `host:pid` leave a row per restart)."""


@dataclass(frozen=True, slots=True)
class CheckIn:
    """What a worker says of itself each time it checks in."""

    worker_key: str
    """The process (unique per process: its machine-id holder)."""
    name: str
    """The worker id its claims carry."""
    pool: str = pools.DEFAULT
    kind: str = WORKER
    host: str = ""
    pid: int | None = None
    version: str = ""
    ttl: float = LEASE_TTL_S
    owner: str | None = None
    """The token it checked in with (its hash); None: a process on the database (the
    embedded engine's in-process workers). Its machine-id lease is that token's."""

    def row(self, now: float) -> port.WorkerRow:
        return port.WorkerRow(
            self.worker_key,
            self.name,
            self.pool,
            self.kind,
            self.host,
            self.pid,
            self.version,
            now,
            now,
            self.ttl,
            owner=self.owner,
        )


def this_process(
    worker_key: str,
    name: str,
    *,
    kind: str = WORKER,
    pool: str = pools.DEFAULT,
    ttl: float = LEASE_TTL_S,
) -> CheckIn:
    """The check-in of the calling process: its host, pid and milepost version."""
    return CheckIn(
        worker_key, name, pool, kind, socket.gethostname(), os.getpid(), __version__, ttl
    )


@dataclass(frozen=True, slots=True)
class RegisteredWorker:
    """A worker as the registry shows it to operators: its row, status and running commands
    (the worker process itself is `worker.loop.Worker`)."""

    row: port.WorkerRow
    status: str
    running: tuple[port.CommandRow, ...]
    """The commands claimed by its name and not settled yet (a lost worker's too, until
    their leases expire and they are issued again)."""


def check_in(store: port.Store, now: float, who: CheckIn) -> port.WorkerRow:
    """Record that `who` is alive at `now` (the first check-in registers it);
    WorkerNameTaken, naming the holder's token, when a live worker of another token holds
    its name: a worker's name is its token's while it is live."""
    try:
        row = store.record_worker(who.row(now))
    except port.WorkerNameTaken as exc:
        raise _named(store, exc) from None
    if row.started_at == now:
        log.info(
            "worker %s registered (pool %s, %s pid %s)",
            who.name,
            who.pool,
            who.host,
            who.pid,
            extra={"action": "worker_registered", "worker_id": who.name},
        )
    return row


def _named(store: port.Store, exc: port.WorkerNameTaken) -> port.WorkerNameTaken:
    """The refusal naming who holds the name: the holder's token by its name and role."""
    owner = exc.fields.get("owner")
    token = store.get_token(str(owner)) if owner else None
    holder = (
        "a process on the database itself"
        if not owner
        else "a token since deleted"
        if token is None
        else f"token {token.name or '(unnamed)'!r} (role {token.role})"
    )
    name = exc.fields.get("name")
    return port.WorkerNameTaken(
        f"worker name {name!r} is held by a live worker of {holder}: a worker's name is "
        "its token's while it is live; choose another MILEPOST_WORKER_ID, or wait until "
        "that worker is lost",
        name=name,
        holder=holder,
    )


def lease_machine_id(
    store: port.Store, now: float, who: CheckIn, holder: str, held: int | None
) -> tuple[int, bool]:
    """A worker's check-in with its machine id: `held` renewed while it is still its
    holder's (and its token's), else a new one leased, `held` itself when it is free (a
    worker minting on `MILEPOST_MACHINE_ID` asks for that one) (returns (id, renewed));
    the registry row seen now."""
    owner = who.owner
    check_in(store, now, who)  # first: a worker refused its name leases nothing
    if held is not None and store.renew_machine_id(held, holder, now, LEASE_TTL_S, owner=owner):
        return held, True
    return store.lease_machine_id(holder, now, LEASE_TTL_S, owner=owner, want=held), False


def check_out(store: port.Store, now: float, who: CheckIn, holder: str, held: int | None) -> None:
    """A clean stop: the machine id `held` given back (while still `holder`'s) and the row
    removed, so a worker that stopped is not reported lost."""
    if held is not None:
        store.release_machine_id(held, holder, now, owner=who.owner)
    if store.forget_workers(worker_key=who.worker_key, owner=who.owner):
        log.info(
            "worker %s stopped", who.name, extra={"action": "worker_stopped", "worker_id": who.name}
        )


def status(row: port.WorkerRow, now: float) -> str:
    return LIVE if row.live(now) else LOST


def workers(
    store: port.Store, now: float, *, pool: str | None = None, status_: str | None = None
) -> list[RegisteredWorker]:
    """The registry, by name (only `pool`'s, only those of `status_` when given), each with
    the commands its name holds."""
    rows = [r for r in store.list_workers() if pool is None or r.pool == pool]
    shown = [(r, status(r, now)) for r in rows]
    shown = [(r, s) for r, s in shown if status_ is None or s == status_]
    if not shown:
        return []
    held: dict[str, list[port.CommandRow]] = {}
    for command in store.open_commands():
        if command.status == port.COMMAND_CLAIMED and command.worker_id is not None:
            held.setdefault(command.worker_id, []).append(command)
    return [RegisteredWorker(r, s, tuple(held.get(r.name, ()))) for r, s in shown]


def counts(store: port.Store, now: float) -> dict[tuple[str, str], int]:
    """(pool, status) -> workers (the metric `milepost_workers`)."""
    found: dict[tuple[str, str], int] = {}
    for row in store.list_workers():
        key = (row.pool, status(row, now))
        found[key] = found.get(key, 0) + 1
    return found


def live_pools(store: port.Store, now: float) -> set[str]:
    """The pools a live `milepost worker` serves (embedded workers serve only their runs)."""
    return {r.pool for r in store.list_workers() if r.kind == WORKER and r.live(now)}


def notice_lost(store: port.Store, now: float) -> list[port.WorkerRow]:
    """Mark and log the workers that stopped checking in; forget those lost long ago. One
    read a tick: the writes only when there is something to write."""
    rows = store.list_workers()
    lost = (
        store.mark_lost_workers(now)
        if any(r.lost_at is None and not r.live(now) for r in rows)
        else []
    )
    for row in lost:
        log.warning(
            "worker %s lost: not seen for %.1fs (pool %s, %s pid %s); its commands "
            "recover as their leases expire",
            row.name,
            now - row.last_seen,
            row.pool,
            row.host,
            row.pid,
            extra={"action": "worker_lost", "worker_id": row.name},
        )
    if any(r.last_seen < now - FORGET_AFTER for r in rows):
        store.forget_workers(seen_before=now - FORGET_AFTER)
    return lost
