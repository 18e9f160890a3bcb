"""Child executions for the `playbook` tool when it runs in an HTTP worker.

The child is started through the server (`POST /api/execute` with the parent's id), and
the worker waits for it like any client would; the child's own steps run on whichever
workers claim them, this one included. Every request carries the claim of the parent
command (`ParentClaim`): a `worker` token may start, watch and cancel only such children.
"""

from __future__ import annotations

import asyncio
from typing import Any

from milepost.client import AsyncMilepostClient, ParentClaim, WaitTimeout
from milepost.tools.playbook import ChildRun, Parent


class ServerChildren:
    """`ChildRunner` over the API."""

    def __init__(self, client: AsyncMilepostClient) -> None:
        self.client = client

    async def run_child(self, path: str, workload: dict[str, Any], *, parent: Parent,
                        timeout: float) -> ChildRun:  # fmt: skip
        claim = ParentClaim(parent.command_id, parent.epoch)
        xid = await self.client.execute(path, workload, parent_execution_id=parent.execution_id,
                                        claim=claim)  # fmt: skip
        try:
            status = await self.client.wait(xid, timeout=timeout, claim=claim)  # the final reply
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

    async def _cancel(self, xid: str, claim: ParentClaim) -> None:
        try:
            await self.client.cancel(xid, claim=claim)
        except Exception:  # noqa: BLE001 - best effort: it may have ended meanwhile
            return
