"""The zombie: a worker that claims a command, gives the claim back, then reports the
command failed anyway, with the epoch of the claim it no longer holds. The fence must
store that report as stale (it changes nothing); a server that takes it fails the run
or, at least, the `fenced` check."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from milepost import wire
from milepost.client import AsyncMilepostClient
from milepost.core.work import AttemptResult, report_events
from milepost.ids import Snowflake

WORKER_ID = "verify-zombie"
CLAIM_FOR = 3.0
"""Seconds the zombie tries to claim something before it gives up (nothing queued)."""


@dataclass(frozen=True, slots=True)
class Haunting:
    event_id: int | None
    """The zombie's report (None: it found nothing to claim)."""
    stale: bool = False
    """The server stored it as stale, as it must."""


async def haunt(url: str, token: str) -> Haunting:
    async with AsyncMilepostClient(url, token, timeout=3) as http:
        # its ids first: between the give-back and the report a live worker may claim and
        # finish the command, and a report of a command already settled is stale whatever
        # the fence does (a loaded machine made that window long enough to miss the fault)
        leased = await http.machine_id(WORKER_ID)
        new_id = Snowflake(int(leased["machine_id"]), time.time)
        deadline = time.monotonic() + CLAIM_FOR
        commands: list[dict[str, object]] = []
        while not commands and time.monotonic() < deadline:
            commands = await http.claim_next(WORKER_ID, limit=1, lease_seconds=30)
            if not commands:
                await asyncio.sleep(0.05)
        if not commands:
            return Haunting(None)
        command = commands[0]
        item = wire.work_item_from_wire(command)
        error = {
            "kind": "zombie",
            "message": "reported after giving the claim back",
            "retryable": False,
        }
        events = report_events(
            item, AttemptResult(ok=False, error=error), new_id(), time.time(), WORKER_ID
        )
        body = wire.jsonable([wire.event_to_wire(e, item.epoch, item.command_id) for e in events])
        await http.release(item.command_id, WORKER_ID, item.epoch)
        reply = await http.post_events(body)
        event_id = events[0].event_id
        return Haunting(event_id, str(event_id) in set(reply.get("stale") or ()))


def haunt_once(url: str, token: str) -> Haunting:
    return asyncio.run(haunt(url, token))
