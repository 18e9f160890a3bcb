"""The embedded engine's workers: they run, in this process, the commands claimed for them.

Commands are claimed through the engine service like a remote worker's (in the
transaction of the report that freed the slot, `claim_request` with limit = free slots),
so fencing, leases and cancel settlement are the server's: a report carries its claim's
epoch, a claim held for a third of its lease (the step's own, `spec.liveness`) is
extended, a claimed command of a run whose cancel was requested is given back instead of
run, a running one is stopped (its heartbeat answers the cancel, or the engine saw it
first: `stop_cancelled`), and on a clean exit the commands claimed and not started are
released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from milepost.attempt.runner import run_attempt
from milepost.attempt.stopping import Stoppable
from milepost.core import cancellation
from milepost.core import events as ev
from milepost.core.logs import DEFAULT_CAP, Captured
from milepost.core.work import TaskRetry, WorkItem, report_events, retry_note_events
from milepost.engine.lifecycle import Claimed, ClaimRequest, Lease, Lifecycle
from milepost.errors import MilepostError
from milepost.store.port import StoreUnavailable
from milepost.tools.base import CredentialLookup

log = logging.getLogger(__name__)

Claim = tuple[WorkItem, Lease]


class InProcessWorkers:
    def __init__(
        self,
        engine: Lifecycle,
        *,
        claimant: str,
        reporter: str,
        lease_s: float,
        concurrency: int,
        credentials: CredentialLookup | None,
        holds: Callable[[int], bool],
        report: Callable[[ev.Event, Sequence[Captured]], None],
        log_cap: int = DEFAULT_CAP,
    ) -> None:
        self.engine = engine
        self.claimant = claimant
        """The worker id of this engine's claims: unique per engine."""
        self.reporter = reporter
        """The `worker_id` its reports carry."""
        self.lease_s = lease_s
        self.capacity = concurrency
        """Worker tasks alive (lent ones included): the slots claims fill."""
        self.credentials = credentials
        self.holds = holds
        self.report = report
        self.log_cap = log_cap
        self.tools: Any = None
        self.busy = 0
        """Attempts running right now."""
        self._queue: asyncio.Queue[Claim] = asyncio.Queue()
        self._held: dict[int, tuple[Lease, float]] = {}
        """command id -> its claim and when it was last extended (`time.monotonic`), from
        the claim to the attempt's end: a claim queued behind a running attempt keeps its
        lease too (a step's liveness may be shorter than the attempt before it)."""
        self._beat = asyncio.Event()
        """Set when a claim arrives that is due before the heartbeats' wait ends (a shorter
        lease than those held)."""
        self._due = 0.0
        """When the heartbeats' wait ends (`time.monotonic`)."""
        self._stops: dict[int, tuple[int, Stoppable]] = {}
        """command id -> the execution and the stop of its running attempt."""

    def free(self) -> int:
        """Slots no attempt runs in nor waits for: what the next claim may take. A worker
        has two: the attempt it runs and the next one, claimed while it runs so that the
        worker goes on at once instead of waiting for the commit of its report."""
        return max(0, 2 * self.capacity - self.busy - self._queue.qsize())

    def claim_request(self, driver: str) -> ClaimRequest | None:
        """The claim of the next report: as many commands of the runs `driver` drives as
        slots are free."""
        free = self.free()
        if free <= 0:
            return None
        return self.engine.claim_request(self.claimant, self.lease_s, free, driver=driver)

    def dispatch(self, claimed: Claimed) -> None:
        """Queue the commands claimed for these workers, each with its render context."""
        orchestrator = self.engine.orchestrator
        for row, lease in claimed:
            cached = orchestrator.cached(row.execution_id)
            cmd = None if cached is None else cached.commands.get(row.command_id)
            if cmd is None:
                cmd = orchestrator.state(row.execution_id).commands.get(row.command_id)
            if cmd is None:  # settled since the claim: nothing to run
                self._give_back(row.command_id, lease)
                continue
            self._queue.put_nowait(
                (orchestrator.work_for(row.execution_id, cmd, lease.epoch), lease)
            )
            now = time.monotonic()
            self._held[row.command_id] = (lease, now)
            if now + self._every(lease) < self._due:
                # waking the heartbeats for every claim cost a task and a turn of the loop
                # per step; one due later is seen when the wait ends
                self._beat.set()

    def spawn(self, name: str, until: asyncio.Event | None = None) -> asyncio.Task[None]:
        """One more worker task (`until`: lent for a while, it stops between items)."""
        self.capacity += 1
        return asyncio.create_task(self._worker(until), name=name)

    async def _next(self, until: asyncio.Event | None) -> Claim | None:
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

    async def _worker(self, until: asyncio.Event | None) -> None:
        try:
            while True:
                got = await self._next(until)
                if got is None:
                    return
                try:
                    await self._run(*got)
                finally:
                    self._held.pop(got[0].command_id, None)
        finally:
            self.capacity -= 1

    async def _run(self, item: WorkItem, lease: Lease) -> None:
        assert self.tools is not None
        if not self.holds(item.execution_id):
            return  # claimed before another process took the run over: its driver reclaims
        orchestrator = self.engine.orchestrator
        state = orchestrator.state(item.execution_id)
        if cancellation.cancel_stops_work(state) or state.terminal:
            self._give_back(item.command_id, lease)  # a cancelled run's work is never run
            return
        playbook = orchestrator.playbook_for(state)
        self.busy += 1
        stopper = Stoppable()
        self._stops[item.command_id] = (item.execution_id, stopper)
        try:
            # a crash in a tool is an `internal` outcome, logged redacted, not a raise; a
            # cancel of the run stops it (`stop_cancelled`): a `cancelled` outcome
            outcome = await stopper.run(
                run_attempt(
                    playbook,
                    item,
                    self.tools,
                    credentials=self.credentials,
                    log_cap=self.log_cap,
                    clock=self.engine.clock,
                    on_retry=lambda retry: self._note(item, retry),
                )
            )
        finally:
            self.busy -= 1
            self._stops.pop(item.command_id, None)
        for event in report_events(
            item, outcome, self.engine.new_id(), self.engine.clock(), self.reporter
        ):
            self.report(event, outcome.logs)

    def _note(self, item: WorkItem, retry: TaskRetry) -> None:
        """A task policy's retry, reported as it starts waiting (`retry_note_events`)."""
        for event in retry_note_events(
            item, retry, self.engine.new_id(), self.engine.clock(), self.reporter
        ):
            self.report(event, retry.logs)

    def _give_back(self, command_id: int, lease: Lease) -> None:
        """Release a claim not started (a cancelled run's is settled by the release)."""
        self._held.pop(command_id, None)
        try:
            self.engine.release(command_id, self.claimant, lease.epoch)
        except MilepostError:  # it moved (expired, settled): nothing to give back
            log.warning("could not release command %s", command_id, exc_info=True)

    def _every(self, lease: Lease) -> float:
        """A claim is extended every third of its own lease (the step's liveness, else the
        engine's; the engine's when shorter: a lease long for a step's timeout must not
        slow the heartbeat that answers a cancel): two heartbeats may be lost before it
        lapses."""
        return min(lease.lease_s or self.lease_s, self.lease_s) / 3

    async def heartbeats(self) -> None:
        """Extend each claim held, every third of its lease."""
        while True:
            now = time.monotonic()
            due = min(
                [beat + self._every(lease) for lease, beat in self._held.values()],
                default=now + self.lease_s / 3,
            )
            self._due = due
            self._beat.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._beat.wait(), max(0.0, due - now))
            now = time.monotonic()
            for command_id, (lease, beat) in list(self._held.items()):
                if now - beat < self._every(lease):
                    continue
                try:
                    extended, cancelled = self.engine.heartbeat(
                        command_id, self.claimant, lease.epoch, self.lease_s
                    )
                except StoreUnavailable:  # not refused: the claim may well be live, so the
                    # attempt goes on, and so do the beats (the lease decides if none lands)
                    log.warning("heartbeat of command %s failed", command_id, exc_info=True)
                    self._held[command_id] = (lease, now)  # tried again in a beat, not at once
                    continue
                except MilepostError:  # lost: its report will be fenced as stale
                    log.warning("heartbeat of command %s refused", command_id, exc_info=True)
                    self._held.pop(command_id, None)
                    running = self._stops.get(command_id)
                    if running is not None:  # settled meanwhile (an operator's retry or
                        running[1].stop()  # skip): nothing waits for it, as for a worker
                    continue
                if command_id in self._held:
                    self._held[command_id] = (extended, now)
                running = self._stops.get(command_id)
                if cancelled and running is not None and running[1].stop():
                    log.info(
                        "execution %s cancelled: attempt of command %s stopped",
                        running[0],
                        command_id,
                        extra={"action": "attempt_stopped"},
                    )

    def stop_cancelled(self, execution_ids: Iterable[int]) -> None:
        """Stop the running attempts of those of these executions whose cancel was asked
        (its poll noticed it, or this process asked): sooner than their heartbeat."""
        xids = set(execution_ids)
        orchestrator = self.engine.orchestrator
        for xid, stopper in list(self._stops.values()):
            state = orchestrator.cached(xid) if xid in xids else None
            if state is not None and cancellation.cancel_stops_work(state):
                stopper.stop()

    def stop_commands(self, command_ids: Iterable[int]) -> None:
        """Stop the running attempts of these commands (the engine settled them: timed
        out, lost); their late reports are stale."""
        for command_id in command_ids:
            running = self._stops.get(command_id)
            if running is not None and running[1].stop():
                log.info(
                    "attempt of command %s stopped: its command was settled",
                    command_id,
                    extra={"action": "attempt_stopped", "execution_id": running[0]},
                )

    def release_unstarted(self) -> None:
        """Give back every claim no attempt started (a clean exit)."""
        while not self._queue.empty():
            item, lease = self._queue.get_nowait()
            self._give_back(item.command_id, lease)
