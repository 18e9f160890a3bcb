"""The embedded engine: the engine service and in-process workers on one asyncio loop.

It is a transport over the same `Lifecycle` as the server's routes: runs start, report,
claim, heartbeat, release and cancel through it, so fencing, leases and cancel settlement
behave as they do behind a server. Workers (`engine.inprocess`) run the commands claimed
for them; their reports go to one reporter task that drains every report waiting and
hands them to the service in one call, which folds, decides, commits reports and
decisions and claims the next commands in ONE transaction. Batching there is what keeps
the commit count per step low when many steps finish at once. Each run's driver lease
(`engine.drivers`) is this transport's own: one process drives a run at a time.
Everything time-based is the service's clock (`engine.clock`), driven on this loop: the
runs' timers, the poll of the runs it drives and the driver leases' renewal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core.logs import DEFAULT_CAP, Captured
from milepost.credentials import Vault
from milepost.engine import workers as registry
from milepost.engine.actions import Plan
from milepost.engine.clock import WAKE
from milepost.engine.drivers import Drivers, ServerDriven, holder_alive
from milepost.engine.errors import AlreadyTerminal
from milepost.engine.factory import Lease, build_engine, given
from milepost.engine.inprocess import InProcessWorkers
from milepost.engine.machine import renew_forever
from milepost.engine.orchestrator import Outcome
from milepost.engine.webhooks import Webhook, WebhookNotifier
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
LEASE_S: float = Settings.model_fields["lease_seconds"].default
"""Seconds a claim of an in-process worker lasts (`MILEPOST_LEASE_SECONDS`); an attempt
that runs longer heartbeats every third of it."""
PYTHON_IDLE_S: float = Settings.model_fields["python_idle_seconds"].default
"""How long a python process beyond the warm ones may idle (`MILEPOST_PYTHON_IDLE_SECONDS`)."""
DEFAULT_TIMEOUT: float = Settings.model_fields["default_timeout"].default
"""The engine's bound of an attempt of a step without `spec.timeout` (`MILEPOST_DEFAULT_TIMEOUT`)."""


class EmbeddedEngine:
    """Runs executions to completion inside this process. Use as `async with`."""

    def __init__(
        self,
        store: Store,
        *,
        concurrency: int = 16,
        python_workers: int = 2,
        python_idle_seconds: float = PYTHON_IDLE_S,
        clock: Callable[[], float] = time.time,
        machine_id: int | None = None,
        tools: Any = None,
        worker_id: str = "embedded",
        credentials: CredentialLookup | None = None,
        vault: Vault | None = None,
        driver_ttl: float = DRIVER_TTL,
        lease_s: float = LEASE_S,
        webhook: Webhook | None = None,
        default_timeout: float | None = DEFAULT_TIMEOUT,
        log_cap: int = DEFAULT_CAP,
    ) -> None:
        self.store = store
        # a bad ttl refused before a machine id is leased
        self.drivers = Drivers(store, clock, driver_ttl, self._lost_run)
        self.holder = self.drivers.holder
        # this process is the only writer of the runs it drives: no look at the log
        # before each decision (its poll folds what others wrote, a cancel); and it calls
        # the service from its loop's thread only: no locks. It leases a machine id, so
        # other processes on this database (another `milepost run` in the same folder)
        # never mint the same event ids; one given is leased too, when free, so that nobody
        # else leases it (the ids are minted on it regardless)
        # approval events leave from a thread of their own: a slow receiver never holds
        # up this loop (the service only queues them)
        self.webhook = None if webhook is None else WebhookNotifier(webhook)
        self.service = build_engine(
            store,
            given(machine_id=machine_id, default_timeout=default_timeout),
            clock=clock,
            lease=Lease(worker_id),
            exclusive=True,
            listeners=() if self.webhook is None else (self.webhook,),
        )
        assert self.service.machine_ids is not None  # a lease was asked for
        self._leased = self.service.machine_ids
        self.orchestrator = self.service.orchestrator
        self.service.on_outcome = self._handle
        # the one clock of the service, driven on this loop (`__aenter__`): the runs' timers
        # wake only the runs this engine drives; its duties look at them and keep their
        # driver leases
        self.timers = self.service.timers
        self.timers.on(WAKE, self._wake)
        self.timers.every("poll", POLL_INTERVAL, self._poll)
        self.timers.every("driver_keeper", self.drivers.ttl / 3, self._keep)
        self.concurrency = concurrency
        self.worker_id = worker_id
        self._tools = tools
        self._owns_tools = tools is None
        self.vault = vault
        self._credentials = credentials or (vault.get if vault is not None else None)
        self._python_workers = python_workers
        self._python_idle_seconds = python_idle_seconds
        self.workers = InProcessWorkers(
            self.service,
            claimant=f"{worker_id}:{self.holder}",
            reporter=worker_id,
            lease_s=lease_s,
            concurrency=0,
            credentials=self._credentials,
            holds=self.drivers.holds,
            report=self._report,
            log_cap=log_cap,
        )
        # in the workers registry as one worker (`milepost workers`), checked in on the
        # driver keeper's beat: it outlives both that beat and a claim's lease
        self.registered = registry.this_process(
            self.workers.claimant,
            self.workers.claimant,
            kind=registry.EMBEDDED,
            ttl=max(lease_s, driver_ttl),
        )
        self._reports: asyncio.Queue[ev.Event] = asyncio.Queue()
        self._printed: dict[int, Sequence[Captured]] = {}
        """What the attempts of the queued reports printed, by report event id."""
        self._gathering = False  # the reporter holds a batch it has not processed yet
        self._tasks: list[asyncio.Task[None]] = []
        self._done: dict[int, asyncio.Event] = {}
        self._children: dict[int, list[int]] = {}
        """parent -> the children this engine started for it (`wait` waits for them too)."""
        self._listeners: list[EventListener] = []
        self._told: dict[int, int] = {}
        """Per execution, the seq up to which the listeners have seen its log."""
        self._active: set[int] = set()
        self._error: BaseException | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> EmbeddedEngine:
        if self._tools is None:
            # as many python processes as workers run attempts at once: a lent worker
            # stands in for a parent that waits on its child, never a python call (a lent
            # one ending its last attempt after the parent's ended may hold a process a
            # moment longer)
            self._tools = ToolRuntime(
                python_workers=self._python_workers,
                python_max=max(self.concurrency, 1),
                python_idle_seconds=self._python_idle_seconds,
                credentials=self._credentials,
                children=self,
            )
        self.workers.tools = self._tools
        registry.check_in(self.store, self.service.clock(), self.registered)
        if self.webhook is not None:
            self.webhook.start()
        self._tasks = [self.workers.spawn(f"worker-{i}") for i in range(self.concurrency)]
        self._tasks.append(asyncio.create_task(self._reporter(), name="reporter"))
        self._tasks.append(asyncio.create_task(self.timers.run(), name="clock"))
        self._tasks.append(asyncio.create_task(self.workers.heartbeats(), name="heartbeats"))
        self._tasks.append(asyncio.create_task(renew_forever(self._leased), name="machine-id"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # a clean exit: the claims not started go back, and resume may take over at once
        # (ended runs' leases just lapse)
        self.workers.release_unstarted()
        self.drivers.release([x for x in self.drivers.driven if x in self._active])
        if self._owns_tools and self._tools is not None:
            await self._tools.aclose()
        if self.webhook is not None:  # the last events (a decision) get a few seconds
            await asyncio.to_thread(self.webhook.close)
        self._leased.release()
        with contextlib.suppress(Exception):  # a locked file: the row is lost after its ttl
            self.store.forget_workers(worker_key=self.registered.worker_key)

    def subscribe(self, listener: EventListener) -> None:
        """Call `listener` with every event of the log of each run this engine drives, in
        log order (for progress displays): those it commits, its claims, and those other
        processes append (a vote, a cancel), folded by its poll. A resumed run's log is
        told from its start."""
        self._listeners.append(listener)

    # -- executions ------------------------------------------------------------------------

    def start(
        self,
        playbook: model.Playbook,
        text: str,
        workload: dict[str, Any] | None = None,
        *,
        parent_execution_id: int | None = None,
        started_by: str | None = None,
    ) -> int:
        """Register the playbook (new catalog version if its text changed) and start a run
        (`started_by`: the identity starting it, `user:<name>`)."""
        _, version = self.service.register(text, playbook)
        return self._start(
            playbook,
            version,
            workload or {},
            parent_execution_id=parent_execution_id,
            started_by=started_by,
        )

    def start_plan(self, plan: Plan) -> int:
        """Start a restart or a re-run (`engine.actions.plan_*`) as a run this engine drives."""
        return self._start(
            plan.playbook, plan.version, plan.workload, started_by=plan.actor, origin=plan.origin
        )

    def _start(
        self, playbook: model.Playbook, version: int, workload: dict[str, Any], **parent: Any
    ) -> int:
        """A new run, its driver lease taken before anything is written."""
        xid = self.orchestrator.new_id()
        self.drivers.take(xid)
        self._done.setdefault(xid, asyncio.Event())
        self._active.add(xid)  # before the start: its first commands are claimed in it
        if parent.get("parent_execution_id") is not None:
            self._children.setdefault(parent["parent_execution_id"], []).append(xid)
        self.service.start(
            playbook, version, workload, execution_id=xid, claim=self._claim(), **parent
        )
        return xid

    def resume(self, execution_id: int, *, replace: str | None = None) -> st.ExecutionState:
        """Continue a run from its last event: re-dispatch its live commands, then decide.

        A command that was in flight when the previous process died is handed out again
        with the same attempt number and idempotency key: it never reported, so for the
        run it has not happened, and the key lets the outside world recognise a repeat.
        Its claim, the dead driver's, is released and claimed again by this engine.

        Takes the run's driver lease first: raises DriverBusy (nothing written) while
        another process holds it, unless that holder is `replace` (known dead).
        """
        state = self.orchestrator.state(execution_id)
        self._done.setdefault(execution_id, asyncio.Event())
        if state.terminal:
            self._done[execution_id].set()
            return state
        self.drivers.take(execution_id, replace=replace)
        # what the previous driver appended before it let go (folded in place, the cache)
        fl.fold(state, self.store.load(execution_id, after_seq=state.last_seq))
        if state.terminal:
            self._done[execution_id].set()
            return state
        self._active.add(execution_id)
        self.service.release_claims(execution_id)
        self.service.process(also=[execution_id], refresh=False, claim=self._claim())
        # a child whose parent ended while nothing drove it: cancelled, and driven to its end
        self.service.cancel_unwaited(execution_id)
        self._catch_up([execution_id])
        return state

    async def take_over(
        self,
        execution_id: int,
        *,
        on_wait: Callable[[DriverLease], None] | None = None,
    ) -> st.ExecutionState:
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
                raise ServerDriven(
                    f"execution {execution_id} is driven by the server (started"
                    " through POST /api/execute; no embedded process drives it)",
                    execution_id=str(execution_id),
                )
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
            await asyncio.sleep(
                min(POLL_INTERVAL / 2, max(0.05, seen.expires_at - self.orchestrator.clock()))
            )

    async def run_child(
        self, path: str, workload: dict[str, Any], *, parent: Parent, timeout: float
    ) -> ChildRun:
        """Start the latest catalog version of `path` as a child and wait for it (DSL 3.5)."""
        entry = self.store.get_playbook(path)
        if entry is None:
            raise PlaybookNotFound(f"no playbook registered at path {path!r}", path=path)
        playbook = self.service.playbook(path, entry.version)
        # the waiting parent holds a worker; lend one back so nested children cannot starve
        # (before the start: the child's first commands are claimed for that slot)
        release = asyncio.Event()
        # it finishes the item it holds on its own time; shutdown cancels it with the rest
        self._tasks.append(self.workers.spawn(f"lent-{parent.command_id}", until=release))
        try:
            xid = self._start(
                playbook,
                entry.version,
                workload,
                parent_execution_id=int(parent.execution_id),
                parent_command_id=parent.command_id or None,
            )
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

    def cancel(self, execution_id: int, actor: str | None = None) -> None:
        """Ask the run to stop: its queued commands are settled, its running attempts
        stopped, its children cancelled; none is run any more."""
        with contextlib.suppress(AlreadyTerminal):
            self.service.cancel(execution_id, actor)
        self.workers.stop_cancelled(self._active)

    async def wait(self, execution_id: int, timeout: float | None = None) -> st.ExecutionState:
        """The run once it has ended, and so have the children this engine started for it
        (a run that ends cancels those still running, `engine.children`: they are driven
        to their end before it is said to have ended). TimeoutError after `timeout`."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        await self._ended(execution_id, deadline)
        state = self.orchestrator.state(execution_id)
        descendants = list(self._children.get(execution_id, ()))
        while descendants:
            child = descendants.pop()
            if child in self._active:
                await self._ended(child, deadline)
            descendants.extend(self._children.get(child, ()))
        return state

    async def _ended(self, execution_id: int, deadline: float | None) -> None:
        done = self._done.setdefault(execution_id, asyncio.Event())
        waiter = asyncio.ensure_future(done.wait())
        left = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
        try:
            await asyncio.wait_for(asyncio.shield(waiter), left)
        finally:
            waiter.cancel()
        if self._error is not None:
            raise self._error
        if execution_id in self.drivers.lost:
            raise self.drivers.lost_error(execution_id)

    def state(self, execution_id: int) -> st.ExecutionState:
        return self.orchestrator.state(execution_id)

    async def run(
        self,
        playbook: model.Playbook,
        text: str,
        workload: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> st.ExecutionState:
        return await self.wait(self.start(playbook, text, workload), timeout)

    # -- internals -------------------------------------------------------------------------

    def _claim(self, also: Iterable[int] = ()) -> Any:
        """The claim of the next call: the free slots, among the runs this engine drives."""
        if not self._active and not also:
            return None
        return self.workers.claim_request(self.holder)

    def _lost_run(self, xid: int) -> None:
        """Another process drives `xid` now: dispatch, report and decide nothing more for it."""
        self._active.discard(xid)
        self.timers.drop(WAKE, xid)
        self._done.setdefault(xid, asyncio.Event()).set()

    def _keep(self, now: float) -> None:
        """A duty of the clock: renew the driver leases, check in with the registry."""
        try:
            self.drivers.tend(self._active)
            registry.check_in(self.store, now, self.registered)
        except Exception:  # a store hiccup: the next turn (or `holds`) tries again
            log.exception("driver lease renewal failed")

    def _handle(self, outcome: Outcome) -> None:
        """What the embedded transport does with every outcome of the service."""
        if self._listeners:
            self._tell(outcome)
        self.workers.dispatch(outcome.claimed)
        asked = {
            e.execution_id for e in outcome.events if e.event_type == ev.EXECUTION_CANCEL_REQUESTED
        }
        if asked:  # by whatever asked (a parent that ended, a cancel): stopped now
            self.workers.stop_cancelled(asked)
        for state in outcome.finished:  # the service dropped their timers
            self._active.discard(state.execution_id)
            self._told.pop(state.execution_id, None)
            self._done.setdefault(state.execution_id, asyncio.Event()).set()
        taken = {row.command_id for row, _ in outcome.claimed}
        waiting = {xid for xid, cmd in outcome.issued if cmd.command_id not in taken}
        if waiting and self.workers.free() > 0:
            # issued by a call that claimed nothing (a cancel's settlement, a timer's wake
            # with every slot busy then): claim them now that a slot is free
            asyncio.get_running_loop().call_soon(self._process_safely, [], list(waiting))

    def _tell(self, outcome: Outcome) -> None:
        """Hand the listeners an outcome's events and claims, after whatever of the log they
        have not seen before them (another process's vote the call folded, a release)."""
        logged = [
            *outcome.events,
            *(lease.event for _, lease in outcome.claimed if lease.event is not None),
        ]
        for event in sorted(logged, key=lambda e: (e.execution_id, e.seq)):
            told = self._told.get(event.execution_id, 0)
            if event.seq <= told:
                continue
            if event.seq > told + 1:
                self._deliver(self._unseen(event.execution_id, told, event.seq))
            self._deliver([event])

    def _catch_up(self, xids: Iterable[int]) -> None:
        """Tell the listeners what the cached states folded past what they have seen:
        the events other processes appended, read by a refresh that decided nothing."""
        if not self._listeners:
            return
        for xid in xids:
            state = self.orchestrator.cached(xid)
            told = self._told.get(xid, 0)
            if state is not None and state.last_seq > told:
                self._deliver(self._unseen(xid, told, state.last_seq + 1))

    def _unseen(self, xid: int, after: int, before: int) -> list[ev.Event]:
        try:
            return self.store.load(xid, after_seq=after, before_seq=before)
        except Exception:  # a display misses a few events; the run must not fail for it
            log.exception("could not read the events of %s the listeners missed", xid)
            return []

    def _deliver(self, events: list[ev.Event]) -> None:
        for event in events:
            self._told[event.execution_id] = max(self._told.get(event.execution_id, 0), event.seq)
            for listener in self._listeners:
                listener(event)

    def _wake(self, xid: int) -> None:
        """A timer of `xid` is due (the clock's `WAKE`): a retry's, an approval's expiry or
        the end of a cancel's grace."""
        if xid in self._active and self.drivers.holds(xid):
            try:  # the timer may be the end of a cancel's grace: abandon what still runs
                self.service.abandon_overdue([xid])
            except Exception:  # the decision below sets the timer again
                log.exception("abandoning the attempts of cancelled run %s failed", xid)
        self._process_safely([], [xid])

    def _process_safely(
        self, reports: list[ev.Event], also: Iterable[int] = (), refresh: bool = False
    ) -> None:
        printed = {
            r.event_id: self._printed.pop(r.event_id)
            for r in reports
            if r.event_id in self._printed
        }
        try:
            also = list(also)
            dropped = self.drivers.fence({r.execution_id for r in reports}.union(also))
            if dropped:  # only runs another process took over
                reports = [r for r in reports if r.execution_id not in dropped]
                also = [x for x in also if x not in dropped]
            if not reports and not also:
                return
            claim = self._claim(also)
            if reports:
                self.service.report(reports, claim, printed, made_here=True)
            if also:  # one claim a call: the report's, if there was one
                self.service.process([], also, refresh=refresh, claim=None if reports else claim)
        except Exception as exc:  # a store failure must not hang the waiters
            log.exception("orchestrator failed")
            self._error = exc
            for done in self._done.values():
                done.set()

    def _report(self, event: ev.Event, printed: Sequence[Captured]) -> None:
        if printed:
            self._printed[event.event_id] = printed
        if not self.workers.busy and not self._gathering and self._reports.empty():
            # no other report to wait for, none held by the reporter: processed in this
            # worker's task, which then runs the command it claimed without two turns of
            # the loop (to the reporter and back)
            self._process_safely([event])
        else:
            self._reports.put_nowait(event)

    async def _reporter(self) -> None:
        while True:
            first = await self._reports.get()
            self._gathering = True
            try:  # group commit: give the attempts still running a few turns to finish
                for _ in range(GROUP_COMMIT_TURNS):
                    if self._reports.qsize() >= self.workers.busy:
                        break
                    await asyncio.sleep(0)
                batch = [first]
                while not self._reports.empty():
                    batch.append(self._reports.get_nowait())
                self._process_safely(batch)
            finally:
                self._gathering = False

    def _poll(self, now: float) -> None:
        """A duty of the clock, every `POLL_INTERVAL`: what changed in the runs this
        engine drives without a call of its own."""
        if not self._active:
            return
        # re-read the log: another process may have asked to cancel, or voted
        self._process_safely([], list(self._active), refresh=True)
        self._catch_up(list(self._active))
        try:  # an attempt silent past its liveness is lost; a run without progress fails
            seen = self.service.reconciler.watch_liveness(now, self._active)
            # an attempt failed by the engine's timeout, or lost, is stopped like a
            # cancelled one: its tool must not run on after its command was settled
            self.workers.stop_commands([*seen.timed_out, *seen.expired])
        except Exception:
            log.exception("liveness check failed")
        cancelled = [
            x
            for x in self._active
            if (s := self.orchestrator.cached(x)) is not None and s.cancel_requested
        ]
        if cancelled:  # their queued commands are never claimed: settle them
            self.workers.stop_cancelled(cancelled)  # and what runs learns it now
            try:
                self.service.settle_cancelled(cancelled)
            except Exception:
                log.exception("settling cancelled runs failed")
