"""The server's orchestrator: a lock per execution around it, and what follows each call.

Routes run in a thread pool and the orchestrator's cached states are plain objects, so
every call that reads or changes an execution's state goes through `Runtime` holding that
execution's lock (`ExecutionLocks`): calls for different executions run side by side,
their database waits included. Across servers the orchestrator is optimistic (`shared=True`:
an append fails if another writer moved the log first). After each call the runtime
publishes the wake-ups of the commands it issued, schedules retry timers with the
reconciler and counts what happened.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from milepost.api.metrics import Metrics
from milepost.core import events as ev
from milepost.core import state as st
from milepost.core.ids import machine_of
from milepost.engine import notify
from milepost.engine.machine import LeasedIds
from milepost.engine.orchestrator import Orchestrator, Outcome
from milepost.playbook import model
from milepost.store import port

log = logging.getLogger(__name__)

T = TypeVar("T")

class ExecutionLocks:
    """One reentrant lock per execution, made on demand and dropped when nobody holds or
    waits for it. `hold` takes several in id order, so two callers cannot deadlock (a
    thread that already holds some may take more only in that order too)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[int, tuple[threading.RLock, int]] = {}

    @contextlib.contextmanager
    def hold(self, execution_ids: Iterable[int]) -> Iterator[None]:
        taken: list[int] = []
        try:
            for xid in sorted(set(execution_ids)):
                with self._guard:
                    lock, users = self._locks.get(xid) or (threading.RLock(), 0)
                    self._locks[xid] = (lock, users + 1)
                taken.append(xid)
                lock.acquire()
            yield
        finally:
            for xid in reversed(taken):
                with self._guard:
                    lock, users = self._locks[xid]
                    if users > 1:
                        self._locks[xid] = (lock, users - 1)
                    else:
                        del self._locks[xid]
                with contextlib.suppress(RuntimeError):  # not acquired: the acquire raised
                    lock.release()

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)


def _locked_ids(new_id: Callable[[], int]) -> Callable[[], int]:
    """The orchestrator's id generator, safe to call from the route threads at once."""
    if isinstance(new_id, LeasedIds):
        return new_id  # it holds its own lock (shared with its renewal): one is enough
    lock = threading.Lock()

    def locked() -> int:
        with lock:
            return new_id()

    return locked


HANDED_OUT_KEPT = 100_000
"""Claims `HandedOut` remembers; past it the oldest go (their reports take the careful
path: one more read)."""


class HandedOut:
    """The claims this server handed out lately: command id -> (execution id, epoch).

    A worker's report normally comes back to the server that handed its command out, with
    that claim's epoch. Such a report needs no read of its command row before the append:
    the store checks the claim in the append's own transaction (`check_claims`), and a
    claim that moved in between (released, re-claimed, expired) fails that append, after
    which the report is fenced the careful way. Anything else (another server's claim, a
    forgotten one, an unexpected event type) takes the careful way at once."""

    def __init__(self, size: int = HANDED_OUT_KEPT) -> None:
        self._size = size
        self._claims: collections.OrderedDict[int, tuple[int, int]] = collections.OrderedDict()
        self._guard = threading.Lock()

    def remember(self, claimed: port.Claimed) -> None:
        with self._guard:
            for row, lease in claimed:
                self._claims[row.command_id] = (row.execution_id, lease.epoch)
            while len(self._claims) > self._size:
                self._claims.popitem(last=False)

    def vouches(self, events: Sequence[ev.Event]) -> bool:
        """True when every event is a settling report of a claim handed out here, with
        that claim's execution and epoch."""
        with self._guard:
            for event in events:
                if event.event_type not in ev.SETTLING_REPORTS:
                    return False
                held = self._claims.get(int(event.payload["command_id"]))
                if held != (event.execution_id, int(event.meta["epoch"])):
                    return False
        return bool(events)

    def forget(self, events: Sequence[ev.Event]) -> None:
        with self._guard:
            for event in events:
                if event.event_type in ev.SETTLING_REPORTS:
                    self._claims.pop(int(event.payload["command_id"]), None)


CANCELLED_BEFORE_CLAIM = {"kind": "cancelled", "retryable": False,
                          "message": "execution cancelled before the command ran"}  # fmt: skip


class Runtime:
    def __init__(self, store: port.Store, orchestrator: Orchestrator, *,
                 publisher: notify.Publisher, metrics: Metrics,
                 pool: str = notify.DEFAULT_POOL) -> None:  # fmt: skip
        self.store = store
        self.orchestrator = orchestrator
        self.publisher = publisher
        self.metrics = metrics
        self.pool = pool
        self.locks = ExecutionLocks()
        self.handed = HandedOut()
        self._catalog = threading.Lock()
        """Registering and parsing playbooks (the orchestrator's catalog caches)."""
        self._minter = orchestrator.new_id
        orchestrator.new_id = _locked_ids(orchestrator.new_id)
        self.on_wake: Callable[[int, float], None] = lambda xid, at: None
        """Called with (execution_id, time) for every retry timer a decision set."""
        self._waiters: dict[int, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._waiters_lock = threading.Lock()

    @property
    def clock(self) -> Callable[[], float]:
        return self.orchestrator.clock

    def new_id(self) -> int:
        return self.orchestrator.new_id()

    def machine_id(self) -> int:
        """The machine id the engine mints with now (fixed, leased, or leased again after
        a lapse); read off a fresh id only for a generator that does not say it."""
        known = getattr(self._minter, "machine_id", None)
        return known if isinstance(known, int) else machine_of(self.new_id())

    def locked(self, execution_ids: Iterable[int]) -> contextlib.AbstractContextManager[None]:
        """Hold these executions' locks (for a read-then-process that must not interleave)."""
        return self.locks.hold(execution_ids)

    # -- the orchestrator, locked ----------------------------------------------------------

    def process(self, reports: Sequence[ev.Event] = (), also: Iterable[int] = (),
                *, refresh: bool = True, claim: port.ClaimRequest | None = None,
                check_claims: bool = False) -> Outcome:  # fmt: skip
        """`Orchestrator.process`, refreshed from the log by default (other writers exist).
        Commands claimed through `claim` are not announced: their worker has them."""
        xids = {e.execution_id for e in reports} | set(also)
        with self.locks.hold(xids):
            started = time.perf_counter()
            outcome = self.orchestrator.process(reports, also, refresh=refresh, claim=claim,
                                                check_claims=check_claims)  # fmt: skip
            self.metrics.evaluation_seconds.observe(time.perf_counter() - started)
        self._after(outcome)
        return outcome

    def register(self, text: str, playbook: model.Playbook) -> tuple[str, int]:
        with self._catalog:
            return self.orchestrator.register(text, playbook)

    def start(self, playbook: model.Playbook, version: int, workload: dict[str, Any],
              parent_execution_id: int | None = None,
              parent_command_id: int | None = None) -> tuple[int, Outcome]:  # fmt: skip
        # no lock: nobody knows the new execution's id before this returns
        started = time.perf_counter()
        xid, outcome = self.orchestrator.start(playbook, version, workload,
                                               parent_execution_id=parent_execution_id,
                                               parent_command_id=parent_command_id)  # fmt: skip
        self.metrics.evaluation_seconds.observe(time.perf_counter() - started)
        self._after(outcome)
        return xid, outcome

    def playbook(self, path: str, version: int) -> model.Playbook:
        """The playbook of a catalog entry (parsed once, then cached by the orchestrator)."""
        with self._catalog:
            return self.orchestrator.catalog_playbook(path, version)

    def read(self, execution_id: int, view: Callable[[st.ExecutionState, model.Playbook], T],
             *, refresh: bool = True, knows: int | None = None) -> T:  # fmt: skip
        """`view(state, playbook)` of an execution brought up to date with the log, under the
        lock (the state object is shared: never keep it past `view`). `refresh=False` skips
        the look at the log, for an execution this runtime has just appended to; `knows`
        skips it when the cached state already holds that live command (a claimed
        command's render context is the state it was issued from, which that cache has)."""
        with self.locks.hold([execution_id]):
            cached = self.orchestrator.cached(execution_id)
            if cached is not None and (not refresh or cached.terminal or (
                    knows is not None and knows in cached.commands)):  # fmt: skip
                state = cached  # an ended run's state never changes: no need to look again
            else:
                state = self._fresh(execution_id)  # rebuilt from the log when not cached
            try:
                return view(state, self.orchestrator.playbook_for(state))
            finally:
                if state.terminal:
                    self.orchestrator.retire(execution_id)  # only live runs stay live

    def _fresh(self, execution_id: int) -> st.ExecutionState:
        cached = self.orchestrator.cached(execution_id)
        if cached is None:
            return self.orchestrator.state(execution_id)  # rebuilt from the log just now
        newer = self.store.load(execution_id, after_seq=cached.last_seq)
        if newer:
            st.fold(cached, newer)  # what other writers appended since this cache last looked
        return cached

    # -- cancellation ----------------------------------------------------------------------

    def cancel(self, execution_id: int) -> st.ExecutionState:
        """Request a cancel and settle the commands nobody claimed yet; returns the state."""
        with self.locks.hold([execution_id]):
            state = self._fresh(execution_id)
            if not state.cancel_requested and not state.terminal:
                event = ev.new_event(self.orchestrator.new_id(), execution_id,
                                     ev.EXECUTION_CANCEL_REQUESTED, self.clock())  # fmt: skip
                self.process([event])
            self.settle_cancelled([execution_id])
            return self.orchestrator.state(execution_id)

    def settle_cancelled(self, execution_ids: Iterable[int]) -> set[int]:
        """Fail the queued commands of cancel-requested executions (claims are refused for
        them, so no worker would ever report them). Returns the executions cancelled."""
        xids = sorted(set(execution_ids))
        with self.locks.hold(xids):
            cancelled: set[int] = set()
            reports: list[ev.Event] = []
            for xid in xids:
                state = self._fresh(xid)
                if not state.cancel_requested or state.terminal:
                    continue
                cancelled.add(xid)
                reports += [self._cancelled_report(row) for row in self.store.open_commands(xid)
                            if row.status == port.COMMAND_QUEUED
                            and row.command_id in state.commands]  # fmt: skip
            if reports:
                self.process(reports)
            return cancelled

    def _cancelled_report(self, row: port.CommandRow) -> ev.Event:
        epoch = row.epoch
        payload = {"command_id": row.command_id, "run": row.run, "index": row.index,
                   "attempt": row.attempt, "epoch": epoch, "error": dict(CANCELLED_BEFORE_CLAIM)}  # fmt: skip
        return ev.new_event(self.orchestrator.new_id(), row.execution_id, ev.COMMAND_FAILED,
                            self.clock(), step=row.step, payload=payload,
                            meta={"epoch": epoch, "source": "server"})  # fmt: skip

    def notice(self, row: port.CommandRow) -> notify.Notice:
        return notify.Notice(row.command_id, row.execution_id, self.pool)

    # -- who waits for a run to end ---------------------------------------------------------

    def watch(self, execution_id: int, loop: asyncio.AbstractEventLoop,
              event: asyncio.Event) -> None:  # fmt: skip
        """Set `event` (on `loop`, from whichever thread ends the run) when a call of this
        runtime finishes `execution_id`: the status long-poll wakes at once instead of at
        its next look at the store. Runs ended elsewhere are not seen: callers re-check."""
        with self._waiters_lock:
            self._waiters.setdefault(execution_id, []).append((loop, event))

    def unwatch(self, execution_id: int, event: asyncio.Event) -> None:
        with self._waiters_lock:
            waiters = [w for w in self._waiters.get(execution_id, ()) if w[1] is not event]
            if waiters:
                self._waiters[execution_id] = waiters
            else:
                self._waiters.pop(execution_id, None)

    def _wake_watchers(self, finished: Iterable[st.ExecutionState]) -> None:
        with self._waiters_lock:
            woken = [w for state in finished for w in self._waiters.pop(state.execution_id, ())]
        for loop, event in woken:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits on it any more
                loop.call_soon_threadsafe(event.set)

    # -- after each call -------------------------------------------------------------------

    def claimed(self, claimed: port.Claimed) -> None:
        """Count commands handed to a worker and remember their claims (`handed`)."""
        self.metrics.commands_claimed.inc(len(claimed))
        self.handed.remember(claimed)

    def _after(self, outcome: Outcome) -> None:
        if outcome.issued:
            self.metrics.commands_issued.inc(len(outcome.issued))
            taken = {row.command_id for row, _ in outcome.claimed}
            notices = [notify.Notice(cmd.command_id, xid, self.pool)
                       for xid, cmd in outcome.issued if cmd.command_id not in taken]  # fmt: skip
            if notices:
                self.publisher.notify(notices)
        if outcome.claimed:
            self.claimed(outcome.claimed)
        if outcome.engine_errors:
            self.metrics.engine_errors.inc(len(outcome.engine_errors))
        for event in outcome.events:
            if event.event_type == ev.COMMAND_COMPLETED and not event.meta.get("stale"):
                self.metrics.commands_completed.labels("completed").inc()
            elif event.event_type == ev.COMMAND_FAILED and not event.meta.get("stale"):
                self.metrics.commands_completed.labels("failed").inc()
        for xid, at in outcome.wake_at.items():
            self.on_wake(xid, at)
        if outcome.finished:
            finished = [state.execution_id for state in outcome.finished]
            with self.locks.hold(finished):
                for xid in finished:
                    self.orchestrator.retire(xid)
            self._wake_watchers(outcome.finished)
