"""The embedded engine: orchestrator + in-process workers on one asyncio loop.

Workers take work items from a queue and run them; their reports go to one
reporter task that drains every report waiting, folds them, decides, and commits
reports and decisions in one transaction (`Orchestrator.process`) before handing out
the next work. Batching there is what keeps the commit count per step low when many
steps finish at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from milepost.core import events as ev
from milepost.core import state as st
from milepost.core.work import Outcome as AttemptOutcome
from milepost.core.work import WorkItem, report_events
from milepost.credentials import Vault
from milepost.engine.machine import RENEW_EVERY_S, LeasedIds, holder_name
from milepost.engine.orchestrator import Orchestrator
from milepost.engine.orchestrator import Outcome as ProcessOutcome
from milepost.errors import MilepostError, PlaybookNotFound
from milepost.playbook import model
from milepost.store.port import Store
from milepost.tools import ToolRuntime
from milepost.tools.base import CredentialLookup
from milepost.tools.playbook import ChildRun
from milepost.worker.attempt import run_attempt

log = logging.getLogger(__name__)

EventListener = Callable[[ev.Event], None]
GROUP_COMMIT_TURNS = 40
POLL_INTERVAL = 1.0
"""How often running executions are re-read, to notice writes from other processes (cancel)."""


class EmbeddedEngine:
    """Runs executions to completion inside this process. Use as `async with`."""

    def __init__(
        self,
        store: Store,
        *,
        concurrency: int = 16,
        python_workers: int = 2,
        clock: Callable[[], float] = time.time,
        machine_id: int | None = None,
        tools: Any = None,
        worker_id: str = "embedded",
        credentials: CredentialLookup | None = None,
        vault: Vault | None = None,
    ) -> None:
        self.store = store
        # no machine id given: lease one, so other processes on this database (another
        # `milepost run` in the same folder) never mint the same event ids
        self._leased = (None if machine_id is not None
                        else LeasedIds(store, clock, holder=holder_name(worker_id)))  # fmt: skip
        self.orchestrator = Orchestrator(store, clock=clock, machine_id=machine_id or 0,
                                         new_id=self._leased)  # fmt: skip
        self.concurrency = concurrency
        self.worker_id = worker_id
        self._tools = tools
        self._owns_tools = tools is None
        self.vault = vault
        self._credentials = credentials or (vault.get if vault is not None else None)
        self._python_workers = python_workers
        self._queue: asyncio.Queue[WorkItem] = asyncio.Queue()
        self._reports: asyncio.Queue[ev.Event | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._done: dict[int, asyncio.Event] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._listeners: list[EventListener] = []
        self._active: set[int] = set()
        self._error: BaseException | None = None
        self._busy = 0
        """Attempts running right now."""

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> EmbeddedEngine:
        if self._tools is None:
            self._tools = ToolRuntime(python_workers=self._python_workers,
                                      credentials=self._credentials, children=self)
        self._tasks = [asyncio.create_task(self._worker(), name=f"worker-{i}")
                       for i in range(self.concurrency)]  # fmt: skip
        self._tasks.append(asyncio.create_task(self._reporter(), name="reporter"))
        self._tasks.append(asyncio.create_task(self._poller(), name="poller"))
        if self._leased is not None:
            self._tasks.append(asyncio.create_task(self._renew_machine_id(self._leased),
                                                   name="machine-id"))  # fmt: skip
        return self

    async def __aexit__(self, *exc: object) -> None:
        for timer in self._timers.values():
            timer.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._owns_tools and self._tools is not None:
            await self._tools.aclose()
        if self._leased is not None:
            self._leased.release()

    def subscribe(self, listener: EventListener) -> None:
        """Call `listener` with every event committed (for progress displays)."""
        self._listeners.append(listener)

    # -- executions ------------------------------------------------------------------------

    def start(self, playbook: model.Playbook, text: str, workload: dict[str, Any] | None = None,
              *, parent_execution_id: int | None = None) -> int:  # fmt: skip
        """Register the playbook (new catalog version if its text changed) and start a run."""
        _, version = self.orchestrator.register(text, playbook)
        xid, outcome = self.orchestrator.start(playbook, version, workload or {},
                                               parent_execution_id=parent_execution_id)  # fmt: skip
        self._done.setdefault(xid, asyncio.Event())
        self._active.add(xid)
        self._handle(outcome)
        return xid

    def resume(self, execution_id: int) -> st.ExecutionState:
        """Continue a run from its last event: re-dispatch its live commands, then decide.

        A command that was in flight when the previous process died is handed out again
        with the same attempt number and idempotency key: it never reported, so for the
        run it has not happened, and the key lets the outside world recognise a repeat.
        """
        state = self.orchestrator.state(execution_id)
        self._done.setdefault(execution_id, asyncio.Event())
        if state.terminal:
            self._done[execution_id].set()
            return state
        self._active.add(execution_id)
        for item in self.orchestrator.open_work(execution_id):
            self._queue.put_nowait(item)
        self._handle(self.orchestrator.process(also=[execution_id]))
        return state

    async def run_child(self, path: str, workload: dict[str, Any], *, parent_execution_id: str,
                        timeout: float) -> ChildRun:  # fmt: skip
        """Start the latest catalog version of `path` as a child and wait for it (DSL 3.5)."""
        entry = self.store.get_playbook(path)
        if entry is None:
            raise PlaybookNotFound(f"no playbook registered at path {path!r}", path=path)
        playbook = self.orchestrator.catalog_playbook(path, entry.version)
        xid, outcome = self.orchestrator.start(playbook, entry.version, workload,
                                               parent_execution_id=int(parent_execution_id))  # fmt: skip
        self._done.setdefault(xid, asyncio.Event())
        self._active.add(xid)
        self._handle(outcome)
        # the waiting parent holds a worker; lend one back so nested children cannot starve
        release = asyncio.Event()
        # it finishes the item it holds on its own time; shutdown cancels it with the rest
        self._tasks.append(asyncio.create_task(self._worker(until=release), name=f"lent-{xid}"))
        try:
            state = await self.wait(xid, timeout)
        except TimeoutError:
            self.cancel(xid)
            raise
        finally:
            release.set()
        completed = tuple(step for step, _ in state.completed_runs)
        results = {s: state.results[s] for s in completed if s in state.results}
        return ChildRun(str(xid), state.status, state.error, results, completed)

    def register_credential(self, name: str, type_: str, data: dict[str, Any]) -> None:
        """Store a credential, encrypted, for `auth:` and keychain entries to use."""
        if self.vault is None:
            raise MilepostError("this engine has no credential vault (set MILEPOST_SECRET_KEY)")
        self.vault.put(name, type_, data)

    def cancel(self, execution_id: int) -> None:
        self._handle(self.orchestrator.request_cancel(execution_id))

    async def wait(self, execution_id: int, timeout: float | None = None) -> st.ExecutionState:
        done = self._done.setdefault(execution_id, asyncio.Event())
        waiter = asyncio.ensure_future(done.wait())
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        finally:
            waiter.cancel()
        if self._error is not None:
            raise self._error
        return self.orchestrator.state(execution_id)

    def state(self, execution_id: int) -> st.ExecutionState:
        return self.orchestrator.state(execution_id)

    async def run(self, playbook: model.Playbook, text: str, workload: dict[str, Any] | None = None,
                  timeout: float | None = None) -> st.ExecutionState:  # fmt: skip
        return await self.wait(self.start(playbook, text, workload), timeout)

    # -- internals -------------------------------------------------------------------------

    def _handle(self, outcome: ProcessOutcome) -> None:
        for event in outcome.events:
            for listener in self._listeners:
                listener(event)
        for xid, cmd in outcome.issued:
            self._queue.put_nowait(self.orchestrator.work_for(xid, cmd))
        for xid, at in outcome.wake_at.items():
            self._schedule(xid, at)
        for state in outcome.finished:
            self._active.discard(state.execution_id)
            timer = self._timers.pop(state.execution_id, None)
            if timer is not None:
                timer.cancel()
            self._done.setdefault(state.execution_id, asyncio.Event()).set()

    def _schedule(self, xid: int, at: float) -> None:
        loop = asyncio.get_running_loop()
        old = self._timers.pop(xid, None)
        if old is not None:
            old.cancel()
        delay = max(0.0, at - self.orchestrator.clock())
        self._timers[xid] = loop.call_later(delay, self._wake, xid)

    def _wake(self, xid: int) -> None:
        self._timers.pop(xid, None)
        self._process_safely([], [xid])

    def _process_safely(self, reports: list[ev.Event], also: Iterable[int] = (),
                        refresh: bool = False) -> None:  # fmt: skip
        try:
            self._handle(self.orchestrator.process(reports, also, refresh=refresh))
        except Exception as exc:  # a store failure must not hang the waiters
            log.exception("orchestrator failed")
            self._error = exc
            for done in self._done.values():
                done.set()

    async def _next_item(self, until: asyncio.Event | None) -> WorkItem | None:
        if until is None:
            return await self._queue.get()
        getter = asyncio.ensure_future(self._queue.get())
        stopper = asyncio.ensure_future(until.wait())
        try:
            done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if getter in done:
            return getter.result()
        getter.cancel()
        return None

    async def _worker(self, until: asyncio.Event | None = None) -> None:
        """Run work items; a worker lent for a while (`until`) stops between items."""
        assert self._tools is not None
        while True:
            item = await self._next_item(until)
            if item is None:
                return
            state = self.orchestrator.state(item.execution_id)
            playbook = self.orchestrator.playbook_for(state)
            self._busy += 1
            try:
                outcome = await run_attempt(playbook, item, self._tools,
                                            credentials=self._credentials)  # fmt: skip
            except Exception as exc:  # a bug in a tool must fail the step, not hang the run
                log.exception("attempt crashed", extra={"step": item.step})
                outcome = AttemptOutcome(ok=False, error={
                    "kind": "internal", "message": f"{type(exc).__name__}: {exc}"})  # fmt: skip
            finally:
                self._busy -= 1
            for event in report_events(item, outcome, self.orchestrator.new_id(),
                                       self.orchestrator.clock(), self.worker_id):  # fmt: skip
                self._reports.put_nowait(event)

    async def _reporter(self) -> None:
        while True:
            first = await self._reports.get()
            # group commit: while other attempts are still running, give them a few turns
            # of the loop to finish, so one transaction carries many reports. With nothing
            # else running (a sequential chain) this costs nothing.
            for _ in range(GROUP_COMMIT_TURNS):
                if self._reports.qsize() >= self._busy:
                    break
                await asyncio.sleep(0)
            batch = [first] if first is not None else []
            while not self._reports.empty():
                nxt = self._reports.get_nowait()
                if nxt is not None:
                    batch.append(nxt)
            self._process_safely(batch)

    async def _renew_machine_id(self, leased: LeasedIds) -> None:
        while True:
            await asyncio.sleep(RENEW_EVERY_S)
            try:
                leased.renew()
            except MilepostError:  # the next round tries again, well within the lease
                log.exception("machine id renewal failed")

    async def _poller(self) -> None:
        while True:
            await asyncio.sleep(POLL_INTERVAL)
            if self._active:
                # re-read the log: another process may have asked to cancel
                self._process_safely([], list(self._active), refresh=True)
