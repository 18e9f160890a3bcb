"""Child executions for the `playbook` tool when it runs in an HTTP worker.

The child is started through the server (`POST /api/execute` with the parent's id), and
the worker waits for it like any client would; the child's own steps run on whichever
workers claim them, this one included. Every request carries the claim of the parent
command (`ParentClaim`): a `worker` token may start, watch and cancel only such children.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from milepost.client import (
    AsyncMilepostClient,
    ParentClaim,
    ServerRefused,
    ServerUnavailable,
    WaitTimeout,
)
from milepost.tools.playbook import ChildRun, Parent

UNAVAILABLE_FIRST = 0.1
UNAVAILABLE_MAX = 2.0
"""The back-off of a wait while the server does not answer (seconds)."""


class ServerChildren:
    """`ChildRunner` over the API."""

    def __init__(self, client: AsyncMilepostClient) -> None:
        self.client = client

    async def run_child(
        self, path: str, workload: dict[str, Any], *, parent: Parent, timeout: float
    ) -> ChildRun:
        claim = ParentClaim(parent.command_id, parent.epoch)
        try:
            xid = await self.client.execute(
                path, workload, parent_execution_id=parent.execution_id, claim=claim
            )
        except ServerUnavailable as exc:  # kind `connection`: `spec.retry` may try again
            raise ConnectionError(str(exc)) from None
        try:
            status = await self._wait(xid, timeout, claim)  # the final reply
        except WaitTimeout:
            await self._cancel(xid, claim)
            raise TimeoutError(f"child {xid} still running after {timeout:g}s") from None
        except BaseException:  # abandoned, or the wait failed (a refused claim): no orphan
            await asyncio.shield(self._cancel(xid, claim))
            raise
        steps: dict[str, Any] = status.get("steps") or {}
        completed = tuple(name for name, s in steps.items() if s.get("status") == "COMPLETED")
        results = {name: steps[name].get("result") for name in completed}
        return ChildRun(str(xid), str(status["status"]), status.get("error"), results, completed)

    async def _wait(self, xid: str, timeout: float, claim: ParentClaim) -> dict[str, Any]:
        """The child's final status. A server that does not answer for a while (restarted,
        paused: the child runs on meanwhile) is waited out until `timeout`, instead of
        failing the parent's step for a lost connection."""
        deadline = time.monotonic() + timeout
        delay = UNAVAILABLE_FIRST
        while True:
            try:
                return await self.client.wait(
                    xid, timeout=max(deadline - time.monotonic(), 0.0), claim=claim
                )
            except (ServerUnavailable, ServerRefused) as exc:
                if isinstance(exc, ServerRefused) and not exc.transient:
                    raise
                if time.monotonic() + delay >= deadline:
                    raise WaitTimeout(f"child {xid}: the server did not answer ({exc})") from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, UNAVAILABLE_MAX)

    async def _cancel(self, xid: str, claim: ParentClaim) -> None:
        try:
            await self.client.cancel(xid, claim=claim)
        except Exception:  # noqa: BLE001 - best effort: it may have ended meanwhile
            return
