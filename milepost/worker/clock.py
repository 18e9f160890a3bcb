"""The worker's time: wall time for events, and the sleeps of polling, heartbeats, leases
and the grace period (tests pass a fake one that moves only when told)."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
