"""ToolRuntime: one per process; dispatches a ToolCall to its executor."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

import httpx

from milepost.tools import base, duckdb_tool, shell
from milepost.tools import http as http_tool
from milepost.tools import python as python_tool

log = logging.getLogger(__name__)

Executor = Callable[[base.ToolCall], Awaitable[base.ToolResult]]


class ToolRuntime:
    """Runs tool calls: python, http, shell, duckdb, noop.

    Owns the python worker pool and the http clients; `run` never raises for a tool failure.

    Args:
        python_workers: size of the python worker pool (processes started lazily).
        http_transport: an httpx transport replacing the network (tests).
        python_start_method: `spawn` (default) or `forkserver`.
    """

    def __init__(
        self,
        python_workers: int = 2,
        *,
        http_transport: httpx.AsyncBaseTransport | None = None,
        python_start_method: str = "spawn",
    ) -> None:
        self.python = python_tool.PythonPool(python_workers, start_method=python_start_method)
        self.http = http_tool.HttpTool(transport=http_transport)
        self._executors: dict[str, Executor] = {
            "python": self.python.run,
            "http": self.http.run,
            "shell": shell.run,
            "duckdb": duckdb_tool.run,
            "noop": _noop,
        }

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(self._executors)

    async def run(self, call: base.ToolCall) -> base.ToolResult:
        started = time.perf_counter()
        executor = self._executors.get(call.kind)
        if executor is None:
            result = base.failure("invalid", f"unsupported tool kind {call.kind!r}")
        else:
            try:
                result = await executor(call)
            except Exception as exc:  # noqa: BLE001 - a bug in an executor is still a task error
                log.exception(
                    "tool %s failed unexpectedly",
                    call.kind,
                    extra={
                        "action": "tool_crashed",
                        "execution_id": call.execution_id,
                        "step": call.step,
                    },
                )
                result = base.failure(
                    "exception", f"{type(exc).__name__}: {exc}", code=type(exc).__name__
                )
        return dataclasses.replace(result, duration_ms=(time.perf_counter() - started) * 1000.0)

    async def aclose(self) -> None:
        """Close the http client of the running loop and stop the python workers."""
        try:
            await self.http.aclose()
        finally:
            await asyncio.to_thread(self.python.close)

    def close(self) -> None:
        """Stop the python workers (sync; http clients need `aclose`)."""
        self.python.close()

    async def __aenter__(self) -> ToolRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _noop(call: base.ToolCall) -> base.ToolResult:
    return base.ToolResult(data={})
