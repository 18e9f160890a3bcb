"""Event ids on a machine id leased from the store, so two processes never mint the same id.

A snowflake names its maker by 10 bits of machine id; two processes on one machine id mint
the same ids in the same millisecond, and an id the log already holds is refused. Every
process that makes ids on a database (servers, `milepost run` and `resume`; workers ask
their server, `POST /api/workers/machine-id`) leases its own from `machine_lease`, renews it
while it runs and gives it back when it stops. A lease that lapsed (the process stalled
past `LEASE_TTL_S`) and was taken by another process is noticed at the next renewal: from
then on ids come from a new lease.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable

from milepost.errors import MilepostError
from milepost.ids import Snowflake
from milepost.store.port import Store

log = logging.getLogger(__name__)

LEASE_TTL_S = 60.0
RENEW_EVERY_S = LEASE_TTL_S / 4
"""Several renewals per lease: one missed (a slow database) does not lose the id."""


class MachineIdLost(MilepostError):
    """The machine id's lease went to another process and no new one could be leased yet:
    no id is made until a renewal leases one."""

    code = "machine_id_lost"


def holder_name(kind: str) -> str:
    """Who holds a lease, for people reading `machine_lease`; unique per process and lease."""
    return f"{kind}:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class LeasedIds:
    """A snowflake generator on a machine id leased from `store` (callable like Snowflake).

    `want`: the machine id the process mints on by its settings (`MILEPOST_MACHINE_ID`):
    leased when free, so that nobody else leases it and every server refuses clients' ids
    on it (`IdSpaces`); the process mints on it whatever it got (a warning says when
    another process holds it)."""

    def __init__(
        self,
        store: Store,
        clock: Callable[[], float],
        *,
        holder: str,
        ttl: float = LEASE_TTL_S,
        want: int | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.holder = holder
        self.ttl = ttl
        self.want = want
        self._mutex = threading.Lock()
        self.machine_id = self._lease()
        self._ids: Snowflake | None = Snowflake(self.machine_id, clock)
        """None: the id was lost and no new one is leased yet (`MachineIdLost`)."""

    def _lease(self) -> int:
        leased = self.store.lease_machine_id(self.holder, self.clock(), self.ttl, want=self.want)
        if self.want is not None and leased != self.want:
            log.warning(
                "machine id %d (MILEPOST_MACHINE_ID) is leased by another process: the ids "
                "both make may collide; give this process another one, or none",
                self.want,
                extra={"action": "machine_id_taken", "machine_id": self.want},
            )
        return leased

    def __call__(self) -> int:
        with self._mutex:
            return self._live()()

    def block(self, n: int) -> int:
        """`Snowflake.block` on the leased id."""
        with self._mutex:
            return self._live().block(n)

    def _live(self) -> Snowflake:
        if self._ids is None:
            raise MachineIdLost(
                f"machine id {self.machine_id} was lost to another process "
                "and no new one is leased yet",
                machine_id=self.machine_id,
            )
        return self._ids

    def renew(self) -> bool:
        """Extend the lease; when another process has the id now, lease a new one and make
        ids with it from here on. True when the id is unchanged."""
        if self._ids is not None and self.store.renew_machine_id(
            self.machine_id, self.holder, self.clock(), self.ttl
        ):
            return True
        lost = self.machine_id
        with self._mutex:  # no id is made between the loss and the new lease
            # another process mints on the lost id: nothing more is made on it, even when
            # the new lease fails (the next renewal tries again)
            self._ids = None
            self.machine_id = self._lease()
            self._ids = Snowflake(self.machine_id, self.clock)
        log.warning(
            "machine id lease lost: leased another",
            extra={"action": "machine_id_relet", "lost": lost, "machine_id": self.machine_id},
        )
        return False

    def release(self) -> None:
        """Give the id back (best effort: it lapses on its own otherwise)."""
        try:
            self.store.release_machine_id(self.machine_id, self.holder, self.clock())
        except Exception:  # a locked SQLite file, a lost connection: the lease lapses anyway
            log.warning(
                "could not release machine id %s",
                self.machine_id,
                exc_info=True,
                extra={"action": "machine_id_release", "machine_id": self.machine_id},
            )


async def renew_forever(leased: LeasedIds, every: float | None = None) -> None:
    """Renew `leased` every `every` seconds (`RENEW_EVERY_S`) until cancelled; for every
    process that leases an id (the embedded engine, the server app).

    Any failure is logged and the next round tries again, well within the lease: were one
    ("database is locked", a dropped connection) to end this task, the lease would lapse
    and another process would mint on the same id. The store call runs in a thread, so a
    slow database does not stall the event loop."""
    while True:
        await asyncio.sleep(RENEW_EVERY_S if every is None else every)
        try:
            await asyncio.to_thread(leased.renew)
        except Exception:
            log.exception("machine id renewal failed", extra={"action": "machine_id_renew"})
