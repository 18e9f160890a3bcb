"""The event ids a worker mints: on `MILEPOST_MACHINE_ID`, else on a machine id leased
from its server and renewed while the worker runs (an id derived from host and pid
collided between workers, silently)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from milepost import __version__
from milepost.client import ServerRefused
from milepost.engine.machine import LEASE_TTL_S, RENEW_EVERY_S
from milepost.errors import MilepostError
from milepost.ids import Snowflake
from milepost.settings import Settings
from milepost.worker import token
from milepost.worker.clock import Clock

log = logging.getLogger(__name__)

RELEASE_TIMEOUT = 5.0
"""Seconds a stopping worker waits to give its machine id back."""


class MachineIdRefused(MilepostError):
    """The server refused to lease a machine id, in a way that retrying will not change."""

    code = "machine_id_refused"

    def __init__(self, cause: ServerRefused) -> None:
        hint = (
            ""  # the message says what to do: another MILEPOST_WORKER_ID
            if cause.code == "worker_name_taken"
            else "; check the worker's token role and that the server is as new as the worker"
        )
        super().__init__(
            f"the server refused a machine id (HTTP {cause.status} {cause.code}: "
            f"{cause.message}){hint}",
            status=cause.status,
            cause_code=cause.code,
        )


class Describable(Protocol):
    worker_id: str
    lease_seconds: float


def describe(worker: Describable) -> dict[str, Any]:
    """A worker's check-in in the registry (`schemas_workers.WorkerIn`): lost after its
    lease seconds without one."""
    return {
        "name": worker.worker_id,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "version": __version__,
        "ttl": worker.lease_seconds,
    }


def machine_id(settings: Settings | None = None) -> int | None:
    """`MILEPOST_MACHINE_ID` (of `settings`), else None: the worker leases one from its
    server as it starts."""
    return (settings or Settings()).machine_id


class MachineIdServer(Protocol):
    async def machine_id(
        self,
        worker_id: str,
        machine_id: int | None = None,
        *,
        pool: str | None = None,
        worker: dict[str, Any] | None = None,
        release: bool = False,
    ) -> dict[str, Any]: ...


class EventIds:
    """Mints a worker's event ids; `new_id` given (or the settings' `machine_id`), on that, else
    on a machine id `lease` takes from the server and `renew_forever` keeps (the store's side
    of the lease is `store.machine_ids.MachineIds`).

    Args:
        holder: who holds the lease, unique per worker process.
        min_poll, max_poll: the back-off of `lease` while the server does not answer.
        pool: the pool the worker serves.
        check_in: the worker's description for the registry (name, host, pid, version,
            ttl), sent with each lease and renewal: the server counts it live while it
            comes within its ttl.
    """

    def __init__(
        self,
        server: MachineIdServer,
        holder: str,
        clock: Clock,
        new_id: Callable[[], int] | None = None,
        *,
        settings: Settings,
        min_poll: float,
        max_poll: float,
        pool: str = "default",
        check_in: dict[str, Any] | None = None,
    ) -> None:
        self.server = server
        self.pool = pool
        self.check_in = check_in
        ttl = float((check_in or {}).get("ttl") or LEASE_TTL_S)
        self.every = min(RENEW_EVERY_S, ttl / 3)
        """Seconds between renewals: each is also the worker's check-in in the registry,
        which counts it lost after its ttl."""
        self.holder = holder
        self.clock = clock
        self.settings = settings
        fixed = machine_id(settings)
        self._new_id: Callable[[], int] | None = new_id or (
            None if fixed is None else Snowflake(fixed, clock.time)
        )
        self.presence_only = new_id is None and fixed is not None
        """Minting on `MILEPOST_MACHINE_ID`, it still holds a lease (never minted with): the
        server knows a worker, and its pool, alive by its lease (`engine.worker_pools`)."""
        self.min_poll = min_poll
        self.max_poll = max_poll
        self._leased: int | None = fixed if self.presence_only else None
        """The machine id leased from the server, to renew (first asked: the environment's,
        so that its reports on it are its own to every server, `engine.id_spaces`)."""
        self._clock_offset = 0.0
        """The server's clock minus this one, as the last lease reply showed it."""

    @property
    def needs_lease(self) -> bool:
        """No id can be minted before `lease`."""
        return self._new_id is None

    def mint(self) -> int:
        assert self._new_id is not None, "the worker leases a machine id before any attempt"
        return self._new_id()

    async def lease(self, stopping: Callable[[], bool]) -> None:
        """Ask the server for a machine id until it answers (or `stopping()`); a refusal that
        will not pass (a 4xx: wrong role, an older server) raises `MachineIdRefused`."""
        delay = self.min_poll
        failures = 0
        while True:
            try:
                await self._ask()
                return
            except ServerRefused as exc:
                if (bad_token := token.refused(exc)) is not None:
                    raise bad_token from exc
                if not exc.transient:
                    raise MachineIdRefused(exc) from exc
                failure: Exception = exc
            except Exception as exc:  # noqa: BLE001 - unreachable, or a malformed reply
                failure = exc
            if stopping():
                return  # no claim follows, so no id is ever needed
            failures += 1
            log.log(
                logging.WARNING if failures == 1 else logging.DEBUG,
                "cannot lease a machine id (%s: %s); retrying every %.1fs at most",
                type(failure).__name__,
                failure,
                self.max_poll,
                extra={"action": "machine_id_failed"},
            )
            await self.clock.sleep(delay)
            delay = min(delay * 2, self.max_poll)

    async def renew_forever(
        self, refused: Callable[[Exception], bool], *, ask_first: bool = False
    ) -> None:
        """Renew (and check in) every `every` seconds (`ask_first`: take it now, once,
        first: a presence lease, which nothing waits for); a failure for which `refused`
        answers True (the token: the worker stops) ends the renewals."""
        while True:
            if not ask_first:
                await self.clock.sleep(self.every)
            ask_first = False
            try:
                await self._ask()
            except Exception as exc:  # noqa: BLE001 - the lease outlives a few misses
                if refused(exc):
                    return
                log.warning(
                    "machine id renewal failed: %s: %s",
                    type(exc).__name__,
                    exc,
                    extra={"action": "machine_id_renew_failed"},
                )

    async def _ask(self) -> None:
        reply = await self.server.machine_id(
            self.holder, self._leased, pool=self.pool, worker=self.check_in
        )
        # the server read its clock at some moment of the round trip: measured against its
        # end, the ids minted lag its clock by the trip at most, and never run ahead of it
        # (the midpoint ran half a long trip ahead: a server paused for 20 s mid-request
        # had every report refused as minted 10 s in its future, until the next renewal)
        self._use(reply, self.clock.time())

    async def release(self) -> None:
        """Give the leased id back and leave the registry (best effort, a few seconds:
        else the server counts the worker lost after its ttl, and the id lapses)."""
        if self._leased is None:
            return
        try:
            await asyncio.wait_for(
                self.server.machine_id(
                    self.holder, self._leased, pool=self.pool, worker=self.check_in, release=True
                ),
                RELEASE_TIMEOUT,
            )
        except Exception as exc:  # noqa: BLE001 - stopping anyway
            level = logging.DEBUG if token.refused(exc) else logging.WARNING  # said already
            log.log(
                level,
                "could not give the machine id back: %s: %s",
                type(exc).__name__,
                exc,
                extra={"action": "machine_id_release_failed"},
            )
        self._leased = None

    def _use(self, reply: Mapping[str, Any], local_now: float) -> None:
        leased = int(reply["machine_id"])
        expires_at = reply.get("expires_at")
        if isinstance(expires_at, int | float) and not isinstance(expires_at, bool):
            # the server refuses ids minted more than a few seconds ahead of its clock:
            # mint on its clock, as measured from this reply (`expires_at` = its now + ttl)
            self._clock_offset = expires_at - LEASE_TTL_S - local_now
        if self.presence_only:  # the ids stay minted on the fixed machine id
            if leased != self._leased and self._leased == machine_id(self.settings):
                log.warning(
                    "machine id %d (MILEPOST_MACHINE_ID) is leased by another process: the "
                    "server refuses this worker's reports on it; set another one, or none",
                    self._leased,
                    extra={"action": "machine_id_taken"},
                )
            self._leased = leased
            return
        if leased != self._leased:
            if self._leased is not None:
                log.warning(
                    "machine id %d was lost: minting with %d from now on",
                    self._leased,
                    leased,
                    extra={"action": "machine_id_relet"},
                )
            self._leased = leased
            self._new_id = Snowflake(leased, self.server_time)

    def server_time(self) -> float:
        """The server's clock, as the last lease reply measured it (this one's before)."""
        return self.clock.time() + self._clock_offset
