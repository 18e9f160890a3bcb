"""The engine service: the run lifecycle, written once for every transport.

The server's routes and the embedded engine are transports over one `Lifecycle`: start,
register, report (with the claim of the reporting worker's next commands in the same
transaction), claim, heartbeat, release, cancel (the request and the settlement of
queued commands), tick (the reconciler's timers, lease expiry, re-publish, re-drive),
reads of a run's state, and watch/unwatch for the status long-poll.

Every call that reads or changes an execution's state holds that execution's lock
(`ExecutionLocks`): calls for different executions run side by side. Across processes the
orchestrator is optimistic when the database is shared (`Orchestrator(shared=True)`).
After each call the service publishes the wake-ups of the commands it issued and did not
hand out, schedules retry timers (`on_wake`) and counts what happened (`Meters`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, TypeVar

from milepost import telemetry
from milepost.core import cancellation
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core.actions import Origin
from milepost.core.approval_state import Voter
from milepost.engine import actions, approvals, attempt_logs, children, diagnosis, notify, reporting
from milepost.engine import cancel as cancelling
from milepost.engine.claims import HandedOut
from milepost.engine.clock import WAKE, Clock
from milepost.engine.errors import AlreadyTerminal
from milepost.engine.id_spaces import IdSpaces
from milepost.engine.liveness_meter import LivenessMeter
from milepost.engine.locks import ExecutionLocks, NoLocks, locked_ids
from milepost.engine.machine import LeasedIds
from milepost.engine.meters import ApprovalClock, Meters
from milepost.engine.orchestrator import Orchestrator, Outcome, claims_by_run
from milepost.engine.reconciler import REQUEUE_AFTER, Reconciler, TickReport
from milepost.engine.store_reads import StoreReads
from milepost.engine.tracing import RunSpans
from milepost.engine.usage_meter import UsageMeter
from milepost.engine.watchers import Watchers
from milepost.errors import ClaimRefused, ConcurrencyConflict, ExecutionNotFound
from milepost.playbook import model
from milepost.store import port
from milepost.store.port import CatalogEntry as CatalogEntry
from milepost.store.port import Claimed as Claimed
from milepost.store.port import ClaimRequest as ClaimRequest
from milepost.store.port import CommandRow as CommandRow
from milepost.store.port import ExecutionRow as ExecutionRow
from milepost.store.port import Keyset as Keyset
from milepost.store.port import Lease as Lease

# the rows above are the engine's answers: a transport names them from here, not the store

log = logging.getLogger(__name__)

T = TypeVar("T")

SETTLE_TRIES = 20
"""Reads of a run's command rows before the engine's settlement of them gives up: each
refusal is a claim, report or expiry another process committed meanwhile, so the run moved."""

Reported = reporting.Reported


class Lifecycle(StoreReads):
    def __init__(
        self,
        store: port.Store,
        orchestrator: Orchestrator,
        *,
        publisher: notify.Publisher | None = None,
        meters: Meters | None = None,
        requeue_after: float = REQUEUE_AFTER,
        exclusive: bool = False,
        default_timeout: float | None = None,
        machine_ids: LeasedIds | None = None,
        timers: Clock | None = None,
    ) -> None:
        self.store = store
        self.orchestrator = orchestrator
        self.machine_ids = machine_ids
        """The machine id the orchestrator's ids are made on, leased (`engine.factory`):
        renewed and given back by the transport; None: not leased (a reader, a test)."""
        self.publisher: notify.Publisher = publisher or notify.NullPublisher()
        self.meters = meters or Meters()
        self._counted = meters is not None  # else no per-event count: nobody reads it
        # `exclusive`: the only writer of its runs (an embedded engine), calling from one
        # thread (its loop): nothing interleaves, and nobody else appends to those logs
        self.locks: ExecutionLocks | NoLocks = NoLocks() if exclusive else ExecutionLocks()
        self._orphans: collections.deque[children.Orphan] = collections.deque()
        """Children nobody waits for any more, cancelled once no execution lock is held
        (`engine.children`)."""
        if isinstance(self.locks, ExecutionLocks):
            self.locks.on_free = self._cancel_orphans
        self.handed = HandedOut()
        self.watchers = Watchers()
        self._catalog = threading.Lock()
        """Registering and parsing playbooks (the orchestrator's catalog caches)."""
        self.id_spaces = IdSpaces(store, lambda: self.clock())
        """The machine ids clients may choose event ids on (the server's ingest)."""
        if not exclusive:
            orchestrator.new_id = locked_ids(orchestrator.new_id)
        self.timers = timers or Clock(orchestrator.clock)
        """The engine's one clock (`engine.clock`): the runs' timers and the transport's
        duties, driven by the transport (`Clock.run`) or stepped by a test. A due run's
        timer wakes it (`wake`) unless the transport fires it itself (the embedded engine,
        for the runs it drives)."""
        self.timers.on(WAKE, self.wake)
        self.reconciler = Reconciler(
            store,
            self,
            self.publisher,
            requeue_after=requeue_after,
            on_expired=lambda _cid: self.meters.lease_expired(),
            default_timeout=default_timeout,
            timers=self.timers,
        )
        self.on_wake: Callable[[int, float], None] = self.reconciler.schedule
        """Called with (execution_id, time) for every timer a decision set (a retry's, the
        end of a cancel's grace, an approval's expiry): set on the clock."""
        self.on_outcome: Callable[[Outcome], None] = lambda outcome: None
        """Called with every outcome (a transport that dispatches work itself)."""
        self.listeners: list[Callable[[Outcome], None]] = []
        """Also called with every outcome, after `on_outcome`: observers of the committed
        events (approval webhooks, approval metrics); what one raises is logged, never
        the caller's failure (its events are committed)."""
        if meters is not None:  # only a reader of the counts pays for the approval clock
            self.listeners.append(ApprovalClock(self.meters, store))
            self.listeners.append(UsageMeter(self.meters, store))
            self.listeners.append(LivenessMeter(self.meters))
        spans = telemetry.active()
        if spans is not None:  # no exporter: no listener, nothing per call
            self.listeners.append(RunSpans(spans))
        self.refresh = not exclusive
        """Other writers may append to these logs: reports fold what they wrote first."""

    @property
    def clock(self) -> Callable[[], float]:
        return self.orchestrator.clock

    def new_id(self) -> int:
        return self.orchestrator.new_id()

    def client_id_refusals(self, event_ids: Iterable[int], owner: str | None) -> dict[int, str]:
        """event id -> why a client of token `owner` may not choose it (`IdSpaces`): an id
        another process, on any server, could mint too."""
        return self.id_spaces.refusals(event_ids, owner)

    def locked(self, execution_ids: Iterable[int]) -> contextlib.AbstractContextManager[None]:
        """Hold these executions' locks (for a read-then-process that must not interleave)."""
        return self.locks.hold(execution_ids)

    # -- the orchestrator, locked ----------------------------------------------------------

    def process(
        self,
        reports: Sequence[ev.Event] = (),
        also: Iterable[int] = (),
        *,
        refresh: bool = True,
        claim: port.ClaimRequest | None = None,
        check_claims: bool = False,
    ) -> Outcome:
        """`Orchestrator.process`, refreshed from the log by default (other writers exist).
        Commands claimed through `claim` are not announced: their worker has them."""
        xids = {e.execution_id for e in reports} | set(also)
        with self.locks.hold(xids):
            started = time.perf_counter()
            outcome = self.orchestrator.process(
                reports, also, refresh=refresh, claim=claim, check_claims=check_claims
            )
            self.meters.evaluated(time.perf_counter() - started)
        self._after(outcome)
        return outcome

    def settle(
        self, execution_ids: Iterable[int], build: Callable[[], list[ev.Event]], **kw: Any
    ) -> tuple[list[ev.Event], Outcome | None]:
        """Process what `build` makes of fresh reads under the runs' locks, the engine's
        own settlements among it (`ev.SETTLES`): a claim, report or lease expiry another
        process committed between the read and the append refuses them (ClaimMoved, nothing
        written), and they are built again from what is there now. Returns the events
        processed and the outcome (None: `build` found nothing to do)."""
        with self.locks.hold(execution_ids):
            for _ in range(SETTLE_TRIES):
                events = build()
                if not events:
                    return [], None
                try:
                    return events, self.process(events, **kw)
                except port.ClaimMoved:
                    continue
        raise ConcurrencyConflict(
            "the commands of these executions kept moving while the engine settled them; try again",
            execution_ids=[str(x) for x in sorted(set(execution_ids))],
        )

    def register(self, text: str, playbook: model.Playbook) -> tuple[str, int]:
        with self._catalog:
            return self.orchestrator.register(text, playbook)

    def start(
        self,
        playbook: model.Playbook,
        version: int,
        workload: dict[str, Any],
        parent_execution_id: int | None = None,
        parent_command_id: int | None = None,
        execution_id: int | None = None,
        claim: port.ClaimRequest | None = None,
        started_by: str | None = None,
        origin: Origin | None = None,
    ) -> tuple[int, Outcome]:
        # no lock: nobody knows the new execution's id before this returns
        started = time.perf_counter()
        xid, outcome = self.orchestrator.start(
            playbook,
            version,
            workload,
            parent_execution_id=parent_execution_id,
            parent_command_id=parent_command_id,
            execution_id=execution_id,
            claim=claim,
            started_by=started_by,
            origin=origin,
        )
        self.meters.evaluated(time.perf_counter() - started)
        self._after(outcome)
        if parent_execution_id is not None:
            self.cancel_unwaited(xid)
        return xid, outcome

    def cancel_unwaited(self, xid: int) -> None:
        """Cancel a running child nobody waits for: its parent ended, its parent's cancel
        was asked or the command that started it was settled (`children.unwaited`). A
        child that starts then (its tool's start was on its way) is missed by the walks
        through the running children of `engine.children`, as is one whose parent ended
        just before this process died: `start` and `recover` look again."""
        parent_id, command_id = self.read(
            xid,
            lambda state, _: (
                (None, None)
                if state.terminal or state.cancel_requested
                else (state.parent_execution_id, state.parent_command_id)
            ),
        )
        why = None if parent_id is None else children.unwaited(self.store, parent_id, command_id)
        if parent_id is None or why is None:
            return
        actor = None
        if why == "cancelled":
            actor = self.read(parent_id, lambda state, _: state.cancel_actor)
        with contextlib.suppress(AlreadyTerminal):
            self.cancel(xid, actor, cancellation.child_cause(parent_id, why))

    def report(
        self,
        events: list[ev.Event],
        claim: port.ClaimRequest | None = None,
        printed: attempt_logs.Printed | None = None,
        *,
        made_here: bool = False,
    ) -> Reported:
        """Check, fence and process a batch of events (nothing is written unless every one
        is taken); `claim`: claim the reporting worker's next commands in the same
        transaction (`claim_request`); `printed`: what the reports' attempts printed.
        `made_here`: reports this engine's in-process workers made of the commands it
        handed them (the checks of a client's batch have nothing to find there; the fence
        still runs)."""
        return reporting.report(self, events, claim, printed, made_here)

    # -- reads -----------------------------------------------------------------------------

    def playbook(self, path: str, version: int) -> model.Playbook:
        """The playbook of a catalog entry (parsed once, then cached by the orchestrator)."""
        with self._catalog:
            return self.orchestrator.catalog_playbook(path, version)

    def read(
        self,
        execution_id: int,
        view: Callable[[st.ExecutionState, model.Playbook], T],
        *,
        refresh: bool = True,
        knows: Collection[int] = (),
    ) -> T:
        """`view(state, playbook)` of an execution brought up to date with the log, under the
        lock (the state object is shared: never keep it past `view`). `refresh=False` skips
        the look at the log, for an execution this engine has just appended to; `knows`
        skips it when the cached state already holds those live commands (a claimed
        command's render context is the state it was issued from, which that cache has)."""
        with self.locks.hold([execution_id]):
            cached = self.orchestrator.cached(execution_id)
            if cached is not None and (
                not refresh
                or cached.terminal
                or (knows and all(c in cached.commands for c in knows))
            ):
                state = cached  # an ended run's state never changes: no need to look again
            else:
                state = self.fresh(execution_id)  # rebuilt from the log when not cached
            try:
                return view(state, self.orchestrator.playbook_for(state))
            finally:
                if state.terminal:
                    self.orchestrator.retire(execution_id)  # only live runs stay live

    def seen_ended(self, execution_id: int) -> bool:
        """Whether this engine has seen the run end (its cached state; no look at the log:
        False means only "not known to have ended")."""
        cached = self.orchestrator.cached(execution_id)
        return cached is not None and cached.terminal

    def fresh(self, execution_id: int) -> st.ExecutionState:
        """The state with whatever other writers appended since the cache last looked
        (call it holding the execution's lock)."""
        cached = self.orchestrator.cached(execution_id)
        if cached is None:
            return self.orchestrator.state(execution_id)  # rebuilt from the log just now
        newer = self.store.load(execution_id, after_seq=cached.last_seq)
        if newer:
            fl.fold(cached, newer)
        return cached

    def diagnosis(self, execution_id: int) -> dict[str, Any]:
        """Why the run is not moving, or why it ended (`engine.diagnosis`)."""
        return diagnosis.of(self, execution_id)

    def waits_of(self, state: st.ExecutionState, playbook: model.Playbook) -> list[dict[str, Any]]:
        """What the run of `state` waits on now (`engine.diagnosis.waits`): call it inside a
        `read`'s view."""
        return diagnosis.waits(self.store, state, playbook, self.clock())

    # -- claims ----------------------------------------------------------------------------

    def claim_request(
        self,
        worker_id: str,
        lease_s: float,
        limit: int,
        pool: str | None = None,
        driver: str | None = None,
    ) -> port.ClaimRequest:
        """The claim a report makes in its own transaction (`report(..., claim=)`);
        `driver`: only commands of the runs this driver lease holder drives."""
        return port.ClaimRequest(
            worker_id, self.clock(), lease_s, limit, pool, driver, new_id=self.orchestrator.new_id
        )

    def claim(
        self, command_id: int, worker_id: str, lease_s: float
    ) -> tuple[port.CommandRow, port.Lease]:
        """Claim one command by id (the store refuses a cancelled run's: `ClaimRefused`)."""
        row = self.command(command_id)
        try:
            lease = self.store.claim(
                row.command_id, worker_id, self.clock(), lease_s, new_id=self.orchestrator.new_id
            )
        except ClaimRefused as exc:
            self.meters.claim_refused(str(exc.fields.get("reason") or exc.code))
            raise
        self.claimed([(row, lease)])
        return row, lease

    def claim_next(
        self, worker_id: str, lease_s: float, limit: int, pool: str | None = None
    ) -> port.Claimed:
        """Claim up to `limit` queued commands (the polling path)."""
        claimed = self.store.claim_next(
            worker_id, self.clock(), lease_s, limit, pool, new_id=self.orchestrator.new_id
        )
        self.claimed(claimed)
        return claimed

    def heartbeat(
        self, command_id: int, worker_id: str, epoch: int, lease_s: float
    ) -> tuple[port.Lease, bool]:
        """Extend a live claim; answers the lease and whether the run's cancel was asked."""
        row = self.command(command_id)
        lease = self.store.heartbeat(row.command_id, worker_id, epoch, self.clock(), lease_s)
        # the projection (one row), not the log: a heartbeat comes every lease/3 per command
        execution = self.store.get_execution(row.execution_id)
        cancelled = execution is not None and (
            execution.cancel_requested or execution.status == st.CANCELLED
        )
        return lease, cancelled

    def release(self, command_id: int, worker_id: str, epoch: int) -> bool:
        """Give back a claimed command that was not started: queued again for another
        worker, same attempt and key. A cancelled run's command is settled instead."""
        row = self.command(command_id)
        released = self.store.release(
            row.command_id, worker_id, epoch, self.clock(), new_id=self.orchestrator.new_id
        )
        # a worker gives back the commands of a cancelled run: settle them so the run can end
        if released and not self.settle_cancelled([row.execution_id]):
            self.publisher.notify([notify.Notice(row.command_id, row.execution_id, row.pool)])
        return bool(released)

    def release_claims(self, execution_id: int) -> int:
        """Give back every live claim of an execution whose driver died (`resume`): its
        commands are queued again, same attempt and key, for the new driver to claim.
        Returns how many were released."""
        released = 0
        for row in self.store.open_commands(execution_id):
            if row.status == port.COMMAND_CLAIMED and row.worker_id is not None:
                with contextlib.suppress(ClaimRefused):  # it moved since: nothing to give back
                    released += self.store.release(
                        row.command_id, row.worker_id, row.epoch, self.clock(), new_id=self.new_id
                    )
        return released

    def claimed(self, claimed: port.Claimed) -> None:
        """Count commands handed to a worker, remember their claims (`handed`) and fold
        their `command.claimed` into the cached states of runs the claiming call did not
        hold (a claim alone, a report's claim of another run's commands), under each run's
        lock when it is free (`Orchestrator.fold_logged`): that run's next report then finds
        its log where the engine left it instead of reading the claims back after its
        append."""
        self.meters.claimed(len(claimed))
        self.handed.remember(claimed)
        for xid, events in sorted(claims_by_run(claimed).items()):
            cached = self.orchestrator.cached(xid)
            if cached is None or cached.last_seq >= events[-1].seq:
                continue  # not cached, or folded by the append that made the claims
            # never waits: a report holding its runs' locks claims other runs' commands
            with self.locks.try_hold(xid) as taken:
                if taken:  # else that run's next report reads them back, as before
                    self.orchestrator.fold_logged(xid, events)

    # -- cancellation ----------------------------------------------------------------------

    def cancel(
        self, execution_id: int, actor: str | None = None, cause: str | None = None
    ) -> st.ExecutionState:
        """Request a cancel (`actor`: who asks, logged on the request), settle the commands
        nobody claimed yet and cancel the running children with the same actor; returns
        the state. AlreadyTerminal when the run had ended before."""
        with self.locks.hold([execution_id]):
            state = self.fresh(execution_id)
            if state.terminal:
                raise AlreadyTerminal(
                    f"execution {execution_id} is already {state.status}",
                    execution_id=str(execution_id),
                    status=state.status,
                )
            if not state.cancel_requested:
                event = cancellation.request(
                    self.new_id(), execution_id, self.clock(), actor, cause
                )
                self.process([event])
            self.settle_cancelled([execution_id])
            state = self.orchestrator.state(execution_id)
            actor = state.cancel_actor or actor
            stops = cancellation.cancel_stops_work(state)  # not while compensating or tearing down
        # outside the parent's lock: locks are taken in id order, one run at a time here
        for child in self.store.running_children(execution_id) if stops else []:
            with contextlib.suppress(AlreadyTerminal, ExecutionNotFound):
                self.cancel(child, actor, cancellation.child_cause(execution_id))
        return self.orchestrator.state(execution_id)

    def abandon_overdue(self, execution_ids: Iterable[int], *, now: bool = False) -> set[int]:
        """Fail, as cancelled, every attempt still live of the cancelled executions whose
        `cancel_grace` has passed (`now`: whatever the grace, for a run nothing drives any
        more); a report that comes later is stale. Returns the executions abandoned."""
        xids = sorted(set(execution_ids))

        def build() -> list[ev.Event]:
            reports: list[ev.Event] = []
            for xid in xids:
                cached = self.orchestrator.cached(xid)
                if cached is not None and not cancellation.cancel_stops_work(cached) and not now:
                    continue  # a retry's timer: no read of the log for it (a cancel that
                    # came meanwhile is folded by the wake's decision, which sets its timer)
                state = self.fresh(xid)
                playbook = self.orchestrator.playbook_for(state)
                if (
                    not cancellation.cancel_stops_work(state)
                    or state.terminal
                    or not state.commands
                    or not (now or cancellation.overdue(state, playbook, self.clock()))
                ):
                    continue
                reports += cancellation.abandoned(
                    state, playbook, self.clock(), self.new_id, actions.epochs(self.store, state)
                )
            return reports

        reports, _ = self.settle(xids, build)
        return {r.execution_id for r in reports}

    def wake(self, execution_id: int) -> None:
        """A timer of the run is due: a retry's, or the end of a cancel's grace."""
        if not self.abandon_overdue([execution_id]):
            self.process(also=[execution_id], refresh=True)

    def settle_cancelled(self, execution_ids: Iterable[int]) -> set[int]:
        """Fail the queued commands of cancel-requested executions (claims are refused for
        them, so no worker would ever report them). Returns the executions cancelled."""
        xids = sorted(set(execution_ids))
        cancelled: set[int] = set()

        def build() -> list[ev.Event]:
            cancelled.clear()
            reports: list[ev.Event] = []
            for xid in xids:
                state = self.fresh(xid)
                if not cancellation.cancel_stops_work(state) or state.terminal:
                    continue  # a run's final steps (compensations, teardown) run
                cancelled.add(xid)
                reports += [
                    cancelling.cancelled_report(row, self.new_id(), self.clock())
                    for row in self.store.open_commands(xid)
                    if row.status == port.COMMAND_QUEUED and row.command_id in state.commands
                ]
            return reports

        self.settle(xids, build)
        return cancelled

    # -- approvals -------------------------------------------------------------------------

    def decide_approval(
        self, approval_id: int, voter: Voter, decision: str, reason: str | None
    ) -> port.ApprovalRow:
        """Record a vote (`approve`/`deny`) and what it decides, in one transaction; the
        refusals of `core.approvals` (not an approver, self-approval, closed, voted)."""
        return approvals.decide_approval(self, approval_id, voter, decision, reason)

    # -- on a clock ------------------------------------------------------------------------

    def tick(self, now: float) -> TickReport:
        """Due retry timers, expired leases, re-published wake-ups, re-drives, settled
        cancels (`Reconciler.tick`)."""
        return self.reconciler.tick(now)

    def recover(self) -> int:
        """Re-evaluate every RUNNING execution once (after a restart)."""
        return self.reconciler.recover()

    # -- who waits for a run to end ---------------------------------------------------------

    def watch(
        self, execution_id: int, loop: asyncio.AbstractEventLoop, event: asyncio.Event
    ) -> None:
        """Set `event` when a call of this engine finishes `execution_id` (`Watchers`)."""
        self.watchers.watch(execution_id, loop, event)

    def unwatch(self, execution_id: int, event: asyncio.Event) -> None:
        self.watchers.unwatch(execution_id, event)

    # -- after each call -------------------------------------------------------------------

    def _after(self, outcome: Outcome) -> None:
        if outcome.issued:
            self.meters.issued(len(outcome.issued))
            taken = {row.command_id for row, _ in outcome.claimed}
            notices = [
                notify.Notice(cmd.command_id, xid, cmd.pool)  # each to its pool's subject
                for xid, cmd in outcome.issued
                if cmd.command_id not in taken
            ]
            if notices:
                self.publisher.notify(notices)
        if outcome.claimed:
            self.claimed(outcome.claimed)
        if outcome.engine_errors:
            self.meters.engine_errors(len(outcome.engine_errors))
        for event in outcome.events if self._counted else ():
            if event.event_type == ev.COMMAND_COMPLETED and not event.meta.get("stale"):
                self.meters.settled("completed")
            elif event.event_type == ev.COMMAND_FAILED and not event.meta.get("stale"):
                self.meters.settled("failed")
        for xid, at in outcome.wake_at.items():
            self.on_wake(xid, at)
        if outcome.finished:
            finished = [state.execution_id for state in outcome.finished]
            with self.locks.hold(finished):
                for xid in finished:
                    self.orchestrator.retire(xid)
                    self.timers.drop(WAKE, xid)  # an ended run has nothing left to wake
            self.watchers.wake(outcome.finished)
        self.on_outcome(outcome)
        for listener in self.listeners:
            try:
                listener(outcome)
            except Exception:
                log.exception("an outcome listener raised", extra={"action": "listener_failed"})
        if outcome.finished or outcome.events:
            try:
                self._orphans.extend(children.orphaned(self.store, self.orchestrator, outcome))
            except Exception:  # the outcome is committed: its caller must not fail for this
                log.exception(
                    "looking for the children of settled commands failed",
                    extra={"action": "child_cancel_failed"},
                )
        if self._orphans and not self.locks.held():
            self._cancel_orphans()

    def _cancel_orphans(self) -> None:
        """Cancel the children nobody waits for any more (`engine.children`), each with its
        own locks: called holding none (`ExecutionLocks.on_free`), as locks are taken in id
        order and a child's id may be lower than its parent's."""
        while self._orphans:
            try:
                child, actor, cause = self._orphans.popleft()
            except IndexError:  # another thread took the last one
                return
            try:
                self.cancel(child, actor, cause)
            except (AlreadyTerminal, ExecutionNotFound):
                continue
            except Exception:
                log.exception(
                    "cancelling child %s failed (%s)",
                    child,
                    cause,
                    extra={"action": "child_cancel_failed", "execution_id": child},
                )
