"""ToolRuntime: one per process; dispatches a ToolCall to its executor."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from milepost.tools import base, shell
from milepost.tools import http as http_tool
from milepost.tools import python as python_tool
from milepost.tools.playbook import ChildRunner, PlaybookTool

if TYPE_CHECKING:
    from milepost.tools.nats_tool.tool import NatsTool
    from milepost.tools.postgres.tool import PostgresTool

log = logging.getLogger(__name__)

Executor = Callable[[base.ToolCall], Awaitable[base.ToolResult]]


class ToolRuntime:
    """Runs tool calls: python, http, postgres, nats, shell, duckdb, playbook, noop.

    Owns the python worker pool and the http clients; `run` never raises for a tool failure.

    Args:
        python_workers: python processes kept warm however long they idle (started on
            the first calls, or by `python.start()`).
        python_max: the most python processes at once: the most calls its host runs at
            once (a worker's concurrency), so no python call waits on another's while the
            host has a free slot; more than `python_workers` start on demand and stop once
            idle for `python_idle_seconds`. Default `python_workers`.
        python_idle_seconds: see `python_max`.
        http_transport: an httpx transport replacing the network (tests).
        credentials: `name -> credential data (decrypted, with its "type") | None`, how
            postgres and http resolve `auth`; None: no credential is registered.
        children: how the `playbook` tool starts and waits for child executions (the
            embedded engine, or the server through the HTTP worker); None: it cannot.
        nats_url: where `nats` calls without `auth` connect; None: `MILEPOST_NATS_URL`
            (read on the first such call).
    """

    def __init__(
        self,
        python_workers: int = 2,
        *,
        python_max: int | None = None,
        python_idle_seconds: float = python_tool.IDLE_SECONDS,
        http_transport: httpx.AsyncBaseTransport | None = None,
        credentials: Callable[[str], Mapping[str, Any] | None] | None = None,
        children: ChildRunner | None = None,
        nats_url: str | None = None,
    ) -> None:
        self.credentials = credentials
        self.nats_url = nats_url
        self._nats: NatsTool | None = None
        """Created on the first nats call, so nats-py's JetStream client loads only when
        used."""
        self._postgres: PostgresTool | None = None
        """Created on the first postgres call, so psycopg loads only when used."""
        self.python = python_tool.PythonPool(
            max(python_workers, 1) if python_max is None else python_max,
            warm=python_workers,
            idle_seconds=python_idle_seconds,
        )
        self.http = http_tool.HttpTool(transport=http_transport, credentials=credentials)
        self._executors: dict[str, Executor] = {
            "python": self.python.run,
            "http": self.http.run,
            "shell": shell.run,
            "duckdb": _run_duckdb,
            "postgres": self._run_postgres,
            "nats": self._run_nats,
            "playbook": PlaybookTool(children).run,
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
                # the traceback as redacted text, not `exc_info`: the exception may quote
                # the call's inputs, secrets included
                log.error(
                    "tool %s failed unexpectedly%s:\n%s",
                    call.kind,
                    call.where(),
                    call.redact(traceback.format_exc()),
                    extra=call.log_extra("tool_crashed"),
                )
                result = base.failure(
                    "exception", f"{type(exc).__name__}: {exc}", code=type(exc).__name__
                )
        return dataclasses.replace(result, duration_ms=(time.perf_counter() - started) * 1000.0)

    async def aclose(self) -> None:
        """Close the http client and postgres connections of the running loop and stop the
        python workers."""
        try:
            await self.http.aclose()
        finally:
            try:
                if self._postgres is not None:
                    await self._postgres.aclose()
            finally:
                await asyncio.to_thread(self.python.close)

    def close(self) -> None:
        """Stop the python workers and close idle postgres connections (sync; http clients
        need `aclose`)."""
        try:
            if self._postgres is not None:
                self._postgres.close()
        finally:
            self.python.close()

    async def _run_postgres(self, call: base.ToolCall) -> base.ToolResult:
        if self._postgres is None:
            from milepost.tools.postgres.tool import PostgresTool

            self._postgres = PostgresTool(self.credentials)
        return await self._postgres.run(call)

    async def _run_nats(self, call: base.ToolCall) -> base.ToolResult:
        if self._nats is None:
            from milepost.settings import Settings
            from milepost.tools.nats_tool.tool import NatsTool

            self._nats = NatsTool(self.credentials, self.nats_url or Settings().nats_url)
        return await self._nats.run(call)

    async def __aenter__(self) -> ToolRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _run_duckdb(call: base.ToolCall) -> base.ToolResult:
    # duckdb loads on the first duckdb call: a process that runs none (every CLI command,
    # the server) does not pay its import
    from milepost.tools import duckdb_tool

    return await duckdb_tool.run(call)


async def _noop(call: base.ToolCall) -> base.ToolResult:
    return base.ToolResult(data={})
