"""The ids a worker mints on a leased machine id follow its server's clock, as the lease
reply showed it, and never run ahead of it (the server refuses ids from its future)."""

from __future__ import annotations

import asyncio
from typing import Any

from milepost.engine.machine import LEASE_TTL_S
from milepost.ids import timestamp_of
from milepost.settings import Settings
from milepost.worker.machine_ids import EventIds
from tests.worker.fakes import FakeClock


class PausedServer:
    """Answers a lease only after `pause` seconds (a server under SIGSTOP), reading its
    clock (the same as the worker's) as it answers."""

    def __init__(self, clock: FakeClock, pause: float) -> None:
        self.clock = clock
        self.pause = pause

    async def machine_id(
        self, worker_id: str, machine_id: int | None = None, *, pool: str | None = None, **_: Any
    ) -> dict[str, Any]:
        self.clock.now += self.pause
        return {"machine_id": 7, "expires_at": self.clock.now + LEASE_TTL_S, "renewed": False}


def test_a_lease_reply_delayed_by_a_paused_server_does_not_move_the_ids_ahead() -> None:
    clock = FakeClock()
    ids = EventIds(
        PausedServer(clock, pause=20.0),
        "w/1",
        clock,
        settings=Settings(),
        min_poll=0.05,
        max_poll=1.0,
    )
    asyncio.run(ids.lease(lambda: False))
    ahead = timestamp_of(ids.mint()) - clock.time()
    # the midpoint of the 20 s trip put them 10 s ahead: every report was refused
    assert ahead <= 0.001, f"ids minted {ahead:.1f} s ahead of the server's clock"
