"""Where an entry runs: in its own embedded engine on the suite's SQLite file, or through
a milepost server and its workers; either way it comes back as a `Run`."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from milepost.client import MilepostClient, WaitTimeout
from milepost.conformance.suite import Catalog
from milepost.credentials import Vault, new_key
from milepost.engine import summaries
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import model
from milepost.store.sqlite import SQLiteStore


@dataclass
class Run:
    """What one entry produced: a final (or timed-out) state, or a rejection message."""

    summary: dict[str, Any] | None = None
    reason: str | None = None
    rejected: str | None = None
    timed_out: bool = False
    children: int | None = None


class Target(Protocol):
    async def execute(
        self,
        text: str,
        playbook: model.Playbook,
        workload: dict[str, Any],
        credentials: dict[str, Any],
        timeout: float,
    ) -> tuple[Run, int | None]: ...


@dataclass
class EmbeddedTarget:
    """Each entry in its own embedded engine on the suite's SQLite file."""

    catalog: Catalog
    store: SQLiteStore

    async def execute(
        self,
        text: str,
        playbook: model.Playbook,
        workload: dict[str, Any],
        credentials: dict[str, Any],
        timeout: float,
    ) -> tuple[Run, int | None]:
        # the suite's credentials live only as long as the suite: an ephemeral key unless
        # the environment provides one
        vault = Vault(self.store, os.environ.get("MILEPOST_SECRET_KEY") or new_key())
        async with EmbeddedEngine(self.store, vault=vault) as engine:
            self.catalog.register_all(engine)
            _register_credentials(engine, credentials)
            xid = engine.start(playbook, text, workload)
            try:
                state = await engine.wait(xid, timeout=timeout)
            except TimeoutError:
                state = engine.state(xid)
                with contextlib.suppress(Exception):  # best effort: leave a terminal record
                    engine.cancel(xid)
                return Run(summary=summaries.execution_summary(state), timed_out=True), xid
            return Run(
                summary=summaries.execution_summary(state),
                reason=summaries.failure_reason(state),
                children=_count_children(self.store.list_executions, xid),
            ), xid


class ServerTarget:
    """Through a milepost server: register, execute, wait, read the status over HTTP."""

    def __init__(self, catalog: Catalog, client: MilepostClient) -> None:
        self.client = client
        self.registered = False
        self.catalog = catalog

    async def execute(
        self,
        text: str,
        playbook: model.Playbook,
        workload: dict[str, Any],
        credentials: dict[str, Any],
        timeout: float,
    ) -> tuple[Run, int | None]:
        return await asyncio.to_thread(self._execute, playbook, workload, credentials, timeout)

    def _execute(
        self,
        playbook: model.Playbook,
        workload: dict[str, Any],
        credentials: dict[str, Any],
        timeout: float,
    ) -> tuple[Run, int | None]:
        if not self.registered:
            for text, _ in self.catalog.loaded.values():
                self.client.register(text)
            self.registered = True
        for name, spec in credentials.items():
            self.client.put_credential(name, spec.get("type"), spec.get("data") or {})
        xid = int(self.client.execute(playbook.path, workload))
        try:
            status = self.client.wait(xid, timeout=timeout)  # the final status reply
        except WaitTimeout:
            status = self.client.status(xid)
            with contextlib.suppress(Exception):
                self.client.cancel(xid)
            return Run(summary=status, timed_out=True), xid
        error = status.get("error") or {}
        reason = (
            error.get("reason") or error.get("message") if status["status"] == "FAILED" else None
        )
        return Run(
            summary=status, reason=reason, children=_count_children(self._executions, xid)
        ), xid

    def _executions(self, *, limit: int, offset: int) -> list[Any]:
        return [
            _Row(int(i["parent_execution_id"]) if i.get("parent_execution_id") else None)
            for i in self.client.executions(limit=limit, offset=offset)
        ]


@dataclass
class _Row:
    parent_execution_id: int | None


def _register_credentials(engine: EmbeddedEngine, credentials: dict[str, Any]) -> None:
    """Register `name -> {type, data}` credentials before the run.

    They are encrypted in the engine's vault and resolved only when a step needs them.
    """
    for cred_name, spec in credentials.items():
        engine.register_credential(cred_name, spec.get("type"), spec.get("data") or {})


def _count_children(list_executions: Callable[..., list[Any]], xid: int) -> int:
    """Executions whose parent is `xid` (the listing has every execution; filter here)."""
    count, offset, page = 0, 0, 500
    while True:
        rows = list_executions(limit=page, offset=offset)
        count += sum(1 for r in rows if r.parent_execution_id == xid)
        if len(rows) < page:
            return count
        offset += page
