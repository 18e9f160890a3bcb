"""Child executions for the `playbook` tool when it runs in an HTTP worker.

The child is started through the server (`POST /api/execute` with the parent's id), and
the worker waits for it like any client would; the child's own steps run on whichever
workers claim them, this one included.
"""

from __future__ import annotations

import asyncio
from typing import Any

from milepost.client import AsyncMilepostClient, WaitTimeout
from milepost.tools.playbook import ChildRun


class ServerChildren:
    """`ChildRunner` over the API."""

    def __init__(self, client: AsyncMilepostClient) -> None:
        self.client = client

    async def run_child(self, path: str, workload: dict[str, Any], *, parent_execution_id: str,
                        timeout: float) -> ChildRun:  # fmt: skip
        xid = await self.client.execute(path, workload, parent_execution_id=parent_execution_id)
        try:
            status = await self.client.wait(xid, timeout=timeout)  # the final status reply
        except WaitTimeout:
            await self._cancel(xid)
            raise TimeoutError(f"child {xid} still running after {timeout:g}s") from None
        except asyncio.CancelledError:  # the parent's attempt is being abandoned
            await asyncio.shield(self._cancel(xid))
            raise
        steps: dict[str, Any] = status.get("steps") or {}
        completed = tuple(name for name, s in steps.items() if s.get("status") == "COMPLETED")
        results = {name: steps[name].get("result") for name in completed}
        return ChildRun(str(xid), str(status["status"]), status.get("error"), results, completed)

    async def _cancel(self, xid: str) -> None:
        try:
            await self.client.cancel(xid)
        except Exception:  # noqa: BLE001 - best effort: it may have ended meanwhile
            return
