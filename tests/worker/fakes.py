"""In-process stand-ins for the server, the clock and the tools, scripted by the tests."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

from milepost.client import ServerRefused
from milepost.engine.machine import LEASE_TTL_S
from milepost.tools.base import ToolCall, ToolResult
from milepost.worker.loop import Worker
from tests.shared import wait_for_async

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: w, path: tests/w}
workflow:
  - step: start
    tool: {kind: python, input: {key: "{{ idempotency_key }}"}, code: "result = key"}
    next: fetch_all
  - step: fetch_all
    loop: {in: "{{ [1, 2, 3] }}", iterator: i}
    tool: {kind: python, input: {i: "{{ i }}"}, code: "result = i"}
    next: total
  - step: total
    tool:
      kind: python
      input: {n: "{{ fetch_all | length }}", failed: "{{ fetch_all.stats.failed }}"}
      code: "result = n"
"""

SECRET_PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: s, path: tests/s}
keychain:
  - {name: db, kind: credential, credential: pg_main}
workflow:
  - step: start
    tool: {kind: python, input: {pw: "{{ keychain.db.password }}"}, code: "result = pw"}
"""


async def settle(turns: int = 50) -> None:
    """Let every task that can run, run (the fakes never do real I/O)."""
    for _ in range(turns):
        await asyncio.sleep(0)


class FakeClock:
    """Time that moves only when the test says so; sleeps wake in time order."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._seq), future))
        await future

    def pending(self) -> list[float]:
        return sorted(at - self.now for at, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        target = self.now + seconds
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            at, _, future = heapq.heappop(self._sleepers)
            if future.done():
                continue
            self.now = max(self.now, at)
            future.set_result(None)
            await settle()
        self.now = target
        await settle()

    async def run_until(self, condition: Callable[[], object]) -> None:
        """`wait_for_async` with this clock: between checks, let the loop run and, while
        the condition still does not hold, move time to the earliest sleeper."""

        async def turn() -> None:
            await settle()
            if not condition() and self.pending():
                await self.next()

        await wait_for_async(condition, between=turn)

    async def next(self) -> float:
        """Advance to the earliest live sleeper; returns how far time moved."""
        await settle()
        live = self.pending()
        assert live, "nothing is sleeping"
        await self.advance(live[0])
        return live[0]


def command(
    command_id: int,
    *,
    execution_id: int = 500,
    step: str = "start",
    epoch: int = 1,
    index: int = -1,
    attempt: int = 1,
    path: str = "tests/w",
    version: int = 1,
    context: dict[str, Any] | None = None,
    loop_steps: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A command in the wire shape of a claim."""
    return {
        "command_id": str(command_id),
        "event_id": str(command_id),
        "execution_id": str(execution_id),
        "step": step,
        "run": 1,
        "index": index,
        "attempt": attempt,
        "idempotency_key": f"key-{command_id}-{attempt}",
        "status": "claimed",
        "playbook": {"path": path, "version": version},
        "context": context
        if context is not None
        else {"workload": {}, "ctx": {}, "iter": {}, "execution_id": str(execution_id)},
        "loop_steps": loop_steps or {},
        "args": {},
        "lease": {"epoch": epoch, "expires_at": "2030-01-01T00:00:00Z"},
    }


LEASE = 30.0
HEARTBEAT = LEASE / 3


def make(
    client: FakeClient | None = None, tools: FakeTools | None = None, **kwargs: Any
) -> tuple[Worker, FakeClient, FakeTools, FakeClock]:
    client = client or FakeClient()
    tools = tools or FakeTools()
    clock = FakeClock()
    ids = iter(range(9_000_000, 10_000_000))
    options: dict[str, Any] = {
        "concurrency": 4,
        "worker_id": "w-1",
        "lease_seconds": LEASE,
        "grace_seconds": 5.0,
        **kwargs,
    }
    worker = Worker(client, tools, clock=clock, new_id=lambda: next(ids), **options)
    return worker, client, tools, clock


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(worker.run())
    await settle()
    try:
        yield task
    finally:
        worker.kill()
        await asyncio.wait_for(task, 5)


HeartbeatScript = Callable[[int, int], dict[str, Any]]


class FakeClient:
    """The server as the worker sees it: a queue of commands, and a record of every call."""

    def __init__(self, playbooks: dict[tuple[str, int], str] | None = None) -> None:
        self.playbooks = playbooks or {("tests/w", 1): PLAYBOOK}
        self.queue: list[dict[str, Any]] = []
        self.claim_limits: list[int] = []
        self.claim_failures: list[Exception] = []
        """What the next claims raise, in order."""
        self.heartbeats: list[tuple[int, int, str]] = []
        self.releases: list[tuple[int, int]] = []
        self.reports: list[list[dict[str, Any]]] = []
        self.resources: list[tuple[str, int | None]] = []
        self.credentials: dict[str, dict[str, Any]] = {}
        self.credential_calls: list[str] = []
        self.on_heartbeat: HeartbeatScript | None = None
        self.report_failures: list[Exception | None] = []
        """What the next reports raise, in order (None: that one goes through)."""
        self.report_claims: list[int | None] = []
        """The `claim.limit` of each report (None: it claimed nothing)."""
        self.report_gate: asyncio.Event | None = None
        self.resource_gate: asyncio.Event | None = None
        self.reported = asyncio.Event()
        self.ignore_reports = False
        """Reply as the server does to reports for a run that had ended: not stored."""
        self.machine_id_calls: list[int | None] = []
        """The machine id each `machine_id` call held (None: asked for a new one)."""
        self.machine_id_pools: list[str | None] = []
        """The pool each `machine_id` call named."""
        self.check_ins: list[dict[str, Any] | None] = []
        """The `worker` (its check-in in the registry) each `machine_id` call sent."""
        self.machine_id_releases: list[int | None] = []
        """The machine id each release (a clean stop) gave back."""
        self.machine_ids_lost: set[int] = set()
        """Ids whose lease the next renewal finds taken by another process."""
        self._next_machine_id = itertools.count(7)
        self.machine_id_failures: list[Exception | dict[str, Any]] = []
        """What the next `machine_id` calls raise (an exception) or answer (a reply)."""
        self.server_clock: Callable[[], float] | None = None
        """The server's time for `expires_at` (None: it is left out, as by an older server)."""

    async def claim_next(
        self,
        worker_id: str,
        limit: int = 1,
        lease_seconds: float | None = None,
        pool: str | None = None,
    ) -> list[dict[str, Any]]:
        self.claim_limits.append(limit)
        if self.claim_failures:
            raise self.claim_failures.pop(0)
        out, self.queue = self.queue[:limit], self.queue[limit:]
        return out

    async def heartbeat(
        self, event_id: int | str, worker_id: str, epoch: int, lease_seconds: float | None = None
    ) -> dict[str, Any]:
        self.heartbeats.append((int(event_id), epoch, worker_id))
        if self.on_heartbeat is not None:
            return self.on_heartbeat(int(event_id), epoch)
        return {"lease": {"epoch": epoch, "expires_at": None}, "cancelled": False}

    async def release(self, event_id: int | str, worker_id: str, epoch: int) -> dict[str, Any]:
        self.releases.append((int(event_id), epoch))
        return {"released": True}

    async def machine_id(
        self,
        worker_id: str,
        machine_id: int | None = None,
        *,
        pool: str | None = None,
        worker: dict[str, Any] | None = None,
        release: bool = False,
    ) -> dict[str, Any]:
        if release:
            self.machine_id_releases.append(machine_id)
            return {"machine_id": machine_id, "expires_at": None, "renewed": False}
        self.machine_id_calls.append(machine_id)
        self.check_ins.append(worker)
        self.machine_id_pools.append(pool)
        if self.machine_id_failures:
            failure = self.machine_id_failures.pop(0)
            if isinstance(failure, Exception):
                raise failure
            return failure
        renewed = machine_id is not None and machine_id not in self.machine_ids_lost
        leased = machine_id if renewed else next(self._next_machine_id)
        expires_at = None if self.server_clock is None else self.server_clock() + LEASE_TTL_S
        return {"machine_id": leased, "expires_at": expires_at, "renewed": renewed}

    async def post_events(
        self, events: list[dict[str, Any]], claim: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        self.report_claims.append(None if claim is None else int(claim["limit"]))
        if self.report_gate is not None:
            await self.report_gate.wait()
        failure = self.report_failures.pop(0) if self.report_failures else None
        if failure is not None:
            raise failure
        self.reports.append(events)
        self.reported.set()
        reply: dict[str, Any] = {
            "accepted": len(events),
            "stored": len(events),
            "event_ids": [e["event_id"] for e in events],
        }
        if self.ignore_reports:
            reply["stored"], reply["ignored"] = 0, reply["event_ids"]
        if claim is not None:  # as the server: the next commands, claimed with the report
            limit = int(claim["limit"])
            reply["commands"], self.queue = self.queue[:limit], self.queue[limit:]
        return reply

    async def resource(self, path: str, version: int | None = None) -> dict[str, Any]:
        self.resources.append((path, version))
        if self.resource_gate is not None:
            await self.resource_gate.wait()
        key = (path, version or 1)
        if key not in self.playbooks:
            raise ServerRefused(404, "playbook_not_found", f"no playbook {path}@{version}")
        return {
            "path": path,
            "version": key[1],
            "catalog_id": f"{path}@{key[1]}",
            "content": self.playbooks[key],
        }

    async def credential(self, name: str) -> dict[str, Any] | None:
        self.credential_calls.append(name)
        return self.credentials.get(name)

    def reported_events(self) -> list[dict[str, Any]]:
        return [e for batch in self.reports for e in batch]


def stale(event_id: int, epoch: int) -> dict[str, Any]:
    raise ServerRefused(409, "stale_epoch", f"command {event_id}: epoch {epoch} is not live")


def cancelled(event_id: int, epoch: int) -> dict[str, Any]:
    """A heartbeat reply saying the command's run was cancelled (its lease kept)."""
    return {"lease": {"epoch": epoch}, "cancelled": True}


class FakeTools:
    """Records tool calls; a call of a gated step (or idempotency key) waits for its gate."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []

    def gate(self, step: str) -> asyncio.Event:
        return self.gates.setdefault(step, asyncio.Event())

    async def run(self, call: ToolCall) -> ToolResult:
        self.calls.append(call)
        gate = self.gates.get(call.step) or self.gates.get(call.idempotency_key)
        if gate is not None:
            try:
                await gate.wait()
            except asyncio.CancelledError:
                self.cancelled.append(call.idempotency_key)
                raise
        return ToolResult(data={"step": call.step, "input": call.input})
