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
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from milepost.attempt.runner import run_attempt
from milepost.core import events as ev
from milepost.core import state as st
from milepost.core.work import WorkItem, report_events
from milepost.credentials import Vault
from milepost.engine.machine import LeasedIds, holder_name, renew_forever
from milepost.engine.orchestrator import Orchestrator
from milepost.engine.orchestrator import Outcome as ProcessOutcome
from milepost.errors import MilepostError, PlaybookNotFound
from milepost.playbook import model
from milepost.settings import Settings
from milepost.store.port import DriverBusy, DriverLease, Store
from milepost.tools import ToolRuntime
from milepost.tools.base import CredentialLookup
from milepost.tools.playbook import ChildRun, Parent

log = logging.getLogger(__name__)

EventListener = Callable[[ev.Event], None]
GROUP_COMMIT_TURNS = 40
POLL_INTERVAL = 1.0
"""How often running executions are re-read, to notice writes from other processes (cancel)."""
DRIVER_TTL: float = Settings.model_fields["driver_ttl"].default
"""Seconds a driver lease lasts without renewal (`MILEPOST_DRIVER_TTL`); renewed every
third of it."""


class DriverLost(MilepostError):
    """Another process took over this execution: this one stopped driving it."""

    code = "driver_lost"


class ServerDriven(MilepostError):
    """No embedded process ever drove this execution: a server did."""

    code = "server_driven"


def driver_holder() -> str:
    """Who drives, for a person reading the lease: `host:pid:suffix` (the suffix tells two
    engines of one process apart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def holder_alive(holder: str) -> bool | None:
    """Whether the process `holder` names still exists, when it is of this host: False means
    it cannot renew its lease, True that it may. None for other hosts (and unreadable
    holders): only their lease's renewal or expiry tells. (Containers that share a hostname
    but not a pid namespace would fool it; they do not share one by default.)"""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    return True


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
        driver_ttl: float = DRIVER_TTL,
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
        if not driver_ttl > 0:  # also NaN: the keeper would spin, or never renew
            raise MilepostError(f"the driver lease ttl must be a positive number of seconds,"
                                f" not {driver_ttl}", setting="MILEPOST_DRIVER_TTL")  # fmt: skip
        self.holder = driver_holder()
        self.driver_ttl = driver_ttl
        self._driven: dict[int, float] = {}
        """Executions this engine holds the driver lease of -> when that lease expires."""
        self._lost: dict[int, DriverLease | None] = {}
        """Executions another process took over -> its lease: nothing more is done for them."""

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> EmbeddedEngine:
        if self._tools is None:
            self._tools = ToolRuntime(python_workers=self._python_workers,
                                      credentials=self._credentials, children=self)
        self._tasks = [asyncio.create_task(self._worker(), name=f"worker-{i}")
                       for i in range(self.concurrency)]  # fmt: skip
        self._tasks.append(asyncio.create_task(self._reporter(), name="reporter"))
        self._tasks.append(asyncio.create_task(self._poller(), name="poller"))
        self._tasks.append(asyncio.create_task(self._keeper(), name="driver-keeper"))
        if self._leased is not None:
            self._tasks.append(asyncio.create_task(renew_forever(self._leased),
                                                   name="machine-id"))  # fmt: skip
        return self

    async def __aexit__(self, *exc: object) -> None:
        for timer in self._timers.values():
            timer.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # a clean exit: resume may take over at once (ended runs' leases just lapse)
        self._release_drivers([x for x in self._driven if x in self._active])
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
        xid = self._take_new()
        xid, outcome = self.orchestrator.start(playbook, version, workload or {},
                                               parent_execution_id=parent_execution_id,
                                               execution_id=xid)  # fmt: skip
        self._done.setdefault(xid, asyncio.Event())
        self._active.add(xid)
        self._handle(outcome)
        return xid

    def resume(self, execution_id: int, *, replace: str | None = None) -> st.ExecutionState:
        """Continue a run from its last event: re-dispatch its live commands, then decide.

        A command that was in flight when the previous process died is handed out again
        with the same attempt number and idempotency key: it never reported, so for the
        run it has not happened, and the key lets the outside world recognise a repeat.

        Takes the run's driver lease first: raises DriverBusy (nothing written) while
        another process holds it, unless that holder is `replace` (known dead).
        """
        state = self.orchestrator.state(execution_id)
        self._done.setdefault(execution_id, asyncio.Event())
        if state.terminal:
            self._done[execution_id].set()
            return state
        self._take(execution_id, replace=replace)
        # what the previous driver appended before it let go (folded in place, the cache)
        st.fold(state, self.store.load(execution_id, after_seq=state.last_seq))
        if state.terminal:
            self._done[execution_id].set()
            return state
        self._active.add(execution_id)
        for item in self.orchestrator.open_work(execution_id):
            self._queue.put_nowait(item)
        self._handle(self.orchestrator.process(also=[execution_id]))
        return state

    async def take_over(self, execution_id: int, *,
                        on_wait: Callable[[DriverLease], None] | None = None,
                        ) -> st.ExecutionState:  # fmt: skip
        """`resume` for `milepost resume`: refuses a run another live process drives.

        A holder of this host is alive or not (its pid says): refused at once, or taken
        over at once. A holder elsewhere is watched until its lease expires (taken over:
        it died, as after a kill -9) or is renewed (refused: it lives). Waiting is what a
        user expects after a crash: they ran `resume` because the driver died, and a lease
        outlives its holder by up to one ttl; `on_wait` tells them whom they wait for.
        A run without any driver lease was never driven by an embedded engine: a server
        started it (`POST /api/execute`) and drives it; ServerDriven.
        """
        seen: DriverLease | None = None
        while True:
            lease = self.store.get_driver(execution_id)
            if lease is None and not self.orchestrator.state(execution_id).terminal:
                raise ServerDriven(f"execution {execution_id} is driven by the server (started"
                                   " through POST /api/execute; no embedded process drives it)",
                                   execution_id=str(execution_id))  # fmt: skip
            alive = None if lease is None else holder_alive(lease.holder)
            dead = lease.holder if lease is not None and alive is False else None
            try:
                return self.resume(execution_id, replace=dead)
            except DriverBusy as exc:
                busy = exc
            if alive or (seen is not None and busy.lease != seen):
                raise busy  # alive, or it renewed its lease while this one waited
            if seen is None and on_wait is not None:
                on_wait(busy.lease)
            seen = busy.lease
            await asyncio.sleep(min(POLL_INTERVAL / 2,
                                    max(0.05, seen.expires_at - self.orchestrator.clock())))

    async def run_child(self, path: str, workload: dict[str, Any], *, parent: Parent,
                        timeout: float) -> ChildRun:  # fmt: skip
        """Start the latest catalog version of `path` as a child and wait for it (DSL 3.5)."""
        entry = self.store.get_playbook(path)
        if entry is None:
            raise PlaybookNotFound(f"no playbook registered at path {path!r}", path=path)
        playbook = self.orchestrator.catalog_playbook(path, entry.version)
        xid = self._take_new()
        xid, outcome = self.orchestrator.start(playbook, entry.version, workload,
                                               parent_execution_id=int(parent.execution_id),
                                               parent_command_id=parent.command_id or None,
                                               execution_id=xid)  # fmt: skip
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
        if execution_id in self._lost:
            raise self._lost_error(execution_id)
        return self.orchestrator.state(execution_id)

    def state(self, execution_id: int) -> st.ExecutionState:
        return self.orchestrator.state(execution_id)

    async def run(self, playbook: model.Playbook, text: str, workload: dict[str, Any] | None = None,
                  timeout: float | None = None) -> st.ExecutionState:  # fmt: skip
        return await self.wait(self.start(playbook, text, workload), timeout)

    # -- the driver lease of each execution this engine drives ---------------------------

    def _take_new(self) -> int:
        """An id for a new execution, its driver lease taken before anything is written."""
        xid = self.orchestrator.new_id()
        self._take(xid)
        return xid

    def _take(self, xid: int, replace: str | None = None) -> None:
        lease = self.store.acquire_driver(xid, self.holder, self.orchestrator.clock(),
                                          self.driver_ttl, replace=replace)  # fmt: skip
        self._driven[xid] = lease.expires_at
        self._lost.pop(xid, None)

    def _holds(self, xid: int) -> bool:
        """Whether this engine may still write for `xid`. Near its expiry (the loop stalled,
        the process was stopped) the lease is renewed first, so a process that wakes up
        after another took over does not append on its behalf."""
        if xid in self._lost:
            return False
        until = self._driven.get(xid)
        if until is None or self.orchestrator.clock() < until - self.driver_ttl / 3:
            return True
        return self._renew(xid)

    def _renew(self, xid: int) -> bool:
        now = self.orchestrator.clock()
        try:
            held = self.store.renew_driver(xid, self.holder, now, self.driver_ttl)
        except Exception:  # unknown: trust the lease only as long as it lasts
            log.exception("could not renew the driver lease of %s", xid)
            return now < self._driven.get(xid, now)
        if held:
            self._driven[xid] = now + self.driver_ttl
            return True
        self._lose(xid)
        return False

    def _lose(self, xid: int) -> None:
        """Another process drives `xid` now: dispatch, report and decide nothing more for it."""
        try:
            lease = self.store.get_driver(xid)
        except Exception:  # only the message would name the new holder
            lease = None
        log.warning("execution %s taken over by %s: no longer driving it", xid,
                    lease.holder if lease else "another process")  # fmt: skip
        self._driven.pop(xid, None)
        self._lost[xid] = lease
        self._active.discard(xid)
        timer = self._timers.pop(xid, None)
        if timer is not None:
            timer.cancel()
        self._done.setdefault(xid, asyncio.Event()).set()

    def _lost_error(self, xid: int) -> DriverLost:
        lease = self._lost.get(xid)
        holder = lease.holder if lease else "another process"
        return DriverLost(f"execution {xid} was taken over by {holder}; this process stopped"
                          " driving it", execution_id=str(xid), holder=holder)  # fmt: skip

    def _tend_drivers(self) -> None:
        """Renew the leases of live runs. Those of ended runs are left to lapse, not
        released: a run that ended needs no driver (resume reads its terminal state before
        any lease), and a release would cost every run a transaction (W3: 200 runs)."""
        for xid in list(self._driven):
            if xid in self._active:
                self._renew(xid)
            else:
                del self._driven[xid]

    def _release_drivers(self, xids: Iterable[int]) -> None:
        for xid in xids:
            self._driven.pop(xid, None)
            try:
                self.store.release_driver(xid, self.holder, self.orchestrator.clock())
            except Exception:  # it lapses on its own within one ttl
                log.exception("could not release the driver lease of %s", xid)

    async def _keeper(self) -> None:
        while True:
            await asyncio.sleep(self.driver_ttl / 3)
            try:
                self._tend_drivers()
            except Exception:  # a store hiccup: the next tick (or `_holds`) tries again
                log.exception("driver lease renewal failed")

    def _fence(self, reports: list[ev.Event],
               also: Iterable[int]) -> tuple[list[ev.Event], list[int]]:  # fmt: skip
        """Leave out the executions this engine no longer drives."""
        also = list(also)
        if not self._driven and not self._lost:
            return reports, also
        dropped = {x for x in {r.execution_id for r in reports}.union(also) if not self._holds(x)}
        if not dropped:
            return reports, also
        return ([r for r in reports if r.execution_id not in dropped],
                [x for x in also if x not in dropped])  # fmt: skip

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
            fenced, kept = self._fence(reports, also)
            if not fenced and not kept:
                return  # nothing left, or only runs another process took over
            self._handle(self.orchestrator.process(fenced, kept, refresh=refresh))
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
            if not self._holds(item.execution_id):
                continue  # queued before another process took the run over
            state = self.orchestrator.state(item.execution_id)
            playbook = self.orchestrator.playbook_for(state)
            self._busy += 1
            try:
                # a crash in a tool is an `internal` outcome, logged redacted, not a raise
                outcome = await run_attempt(playbook, item, self._tools,
                                            credentials=self._credentials)  # fmt: skip
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

    async def _poller(self) -> None:
        while True:
            await asyncio.sleep(POLL_INTERVAL)
            if self._active:
                # re-read the log: another process may have asked to cancel
                self._process_safely([], list(self._active), refresh=True)
