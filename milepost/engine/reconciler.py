"""The reconciler: what the server does on a clock rather than on a request.

It is the engine service's (`Lifecycle.tick`, which drives it); `tick(now)` is a duty of
the server's clock (`engine.clock`), once a `reconcile_interval` (docs/server-contract.md,
"Leases, fencing, reconciler"):

1. wakes executions whose retry timer is due, or whose cancel grace ended (their live
   attempts are abandoned as cancelled); every server: the timers come from this
   server's own `process` outcomes, and waking twice is harmless. They wait on the clock
   (kind `WAKE`), whose driver fires each at its time; a tick takes those due that were
   not (a test stepping the tick alone);
2. then, on the leader only (a PostgreSQL advisory lock, `store.try_leader_lock()`, when
   the store has one):
   - appends `command.lease_expired` for each expired claim, through the orchestrator, so
     the fold counts the attempt as lost and decide issues a new one (new key);
   - re-publishes the wake-up of commands queued for more than `requeue_after` seconds,
     and settles the queued commands of executions whose cancel was requested;
   - logs the workers that stopped checking in (`engine.workers.notice_lost`);
   - fails the runs that made no progress for their `executor.spec.stall_after`
     (`engine.liveness`), and the attempts of steps without `spec.timeout` claimed for
     longer than the engine's `default_timeout`;
   - re-drives executions the store reports as stuck (`executions_to_redrive`), but for
     those waiting for a retry timer this server holds.

Every action is an append through the engine service, which serializes executions, so two
reconcilers at once waste work but cannot corrupt a run. Time comes in as `now`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from milepost.core import events as ev
from milepost.core import liveness as leases
from milepost.engine import liveness, notify, workers
from milepost.engine.clock import WAKE, Clock
from milepost.store import port

if TYPE_CHECKING:
    from milepost.engine.lifecycle import Lifecycle

log = logging.getLogger(__name__)

REQUEUE_AFTER = 5.0
RECOVER_BATCH = 100


@dataclass(slots=True)
class TickReport:
    """What one tick did (for tests, logs and metrics)."""

    leader: bool = True
    woken: list[int] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)
    """Command ids whose lease expired and were reported lost."""
    republished: list[int] = field(default_factory=list)
    redriven: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    stalled: list[int] = field(default_factory=list)
    """Executions failed for making no progress for `executor.spec.stall_after`."""
    timed_out: list[int] = field(default_factory=list)
    """Commands failed (kind `timeout`) for running past the engine's `default_timeout`."""
    lost_workers: list[str] = field(default_factory=list)
    """Workers found lost (not seen for their ttl), by name."""
    errors: int = 0


class Reconciler:
    def __init__(
        self,
        store: port.Store,
        driver: Lifecycle,
        publisher: notify.Publisher,
        *,
        requeue_after: float = REQUEUE_AFTER,
        on_expired: Callable[[int], None] | None = None,
        default_timeout: float | None = None,
        timers: Clock | None = None,
    ) -> None:
        self.store = store
        self.timers = timers or Clock(driver.clock)
        """Where the runs' timers wait (`engine.clock`, kind `WAKE`)."""
        self.driver = driver
        self.publisher = publisher
        self.requeue_after = requeue_after
        self.on_expired = on_expired
        self._reported: set[int] = set()
        """Expired claims already reported, in case the store still lists them as claimed."""
        self._noticed: dict[int, float] = {}
        """command id -> when its wake-up was last re-published."""
        self.default_timeout = default_timeout
        """Bounds an attempt of a step without `spec.timeout` (settings); None: unbounded."""
        self._bounded: set[int] = set()
        """Overdue commands whose step has its own timeout (`liveness.fail_overdue`)."""

    # -- retry timers ----------------------------------------------------------------------

    def schedule(self, execution_id: int, at: float) -> None:
        """Wake `execution_id` at `at` (thread-safe; Outcome.wake_at feeds this)."""
        self.timers.at(WAKE, execution_id, at)

    def pending_timers(self) -> list[tuple[float, int]]:
        return self.timers.pending(WAKE)

    # -- the tick --------------------------------------------------------------------------

    def tick(self, now: float) -> TickReport:
        report = TickReport()
        # a due timer is a retry's, or the end of a cancel's grace (`Lifecycle.wake`)
        report.woken = self._each(self.timers.due(WAKE, now), report, self.driver.wake)
        leader_lock = getattr(self.store, "try_leader_lock", None)
        if leader_lock is not None and not leader_lock():
            report.leader = False
            return report
        self._expire(now, report)
        self._requeue(now, report)
        self._notice_lost_workers(now, report)
        self._watch_liveness(now, report, None)
        # a run waiting for its retry timer is idle on purpose
        waiting = {xid for at, xid in self.timers.pending(WAKE) if at > now}
        redrive = [x for x in self.store.executions_to_redrive(now) if x not in waiting]
        report.redriven = self._each(
            redrive, report, lambda xid: self.driver.process(also=[xid], refresh=True)
        )
        return report

    def recover(self) -> int:
        """Re-evaluate every RUNNING execution once (after a restart: retry timers lived in
        the memory of the server that stopped), and cancel the children nobody waits for
        any more (their parent ended, or settled the command that started them, while the
        server that would have cancelled them stopped). Returns how many were evaluated."""
        count, offset = 0, 0
        while True:
            rows = self.store.list_executions(status="RUNNING", limit=RECOVER_BATCH, offset=offset)
            if not rows:
                return count
            offset += len(rows)
            scratch = TickReport()
            count += len(
                self._each(
                    [r.execution_id for r in rows],
                    scratch,
                    lambda xid: self.driver.process(also=[xid], refresh=True),
                )
            )
            children = [r.execution_id for r in rows if r.parent_execution_id is not None]
            self._each(children, scratch, self.driver.cancel_unwaited)

    def watch_liveness(self, now: float, only: Container[int]) -> TickReport:
        """Expired claims and stalled runs of the executions in `only` alone: the embedded
        engine's poll, for the runs it drives (it is their only writer)."""
        report = TickReport()
        self._expire(now, report, only)
        self._watch_liveness(now, report, only)
        return report

    def _watch_liveness(self, now: float, report: TickReport, only: Container[int] | None) -> None:
        report.stalled, errors = liveness.fail_stalled(self.driver, now, only)
        report.errors += errors
        if self.default_timeout:
            report.timed_out, errors = liveness.fail_overdue(
                self.driver, now, self.default_timeout, self._bounded, only
            )
            report.errors += errors

    def _expire(self, now: float, report: TickReport, only: Container[int] | None = None) -> None:
        # each claim's own lease end: the step's liveness, or the lease its claimer asked for
        rows = [
            row
            for row in self.store.expired_claims(now)
            if only is None or row.execution_id in only
        ]
        self._reported &= {row.command_id for row in rows}
        fresh = [row for row in rows if row.command_id not in self._reported]
        by_exec: dict[int, list[port.CommandRow]] = {}
        for row in fresh:
            by_exec.setdefault(row.execution_id, []).append(row)

        def expire(xid: int) -> None:
            # the rows were read outside the run's lock, maybe before a database outage
            # while a report was on its way: read again under it, and have the append check
            # each claim is still live at its epoch in its own transaction (a report of
            # another server committed in between: nothing is written, the next tick reads)
            with self.driver.locked({xid}):
                lapsed = still_expired(self.store, by_exec[xid], now)
                if not lapsed:
                    return
                events = [self._lease_expired(row, now) for row in lapsed]
                try:
                    self.driver.process(events, check_claims=True)
                except port.ClaimMoved:
                    return
            for row in lapsed:
                self._reported.add(row.command_id)
                report.expired.append(row.command_id)
                if self.on_expired is not None:
                    self.on_expired(row.command_id)

        self._each(sorted(by_exec), report, expire)

    def _lease_expired(self, row: port.CommandRow, now: float) -> ev.Event:
        return leases.lease_expired(
            row.execution_id,
            row.command_id,
            row.step,
            (row.run, row.index, row.attempt),
            row.epoch,
            row.worker_id,
            row.lease_expires_at,
            self.driver.new_id(),
            now,
        )

    def _notice_lost_workers(self, now: float, report: TickReport) -> None:
        try:
            report.lost_workers = [r.name for r in workers.notice_lost(self.store, now)]
        except Exception:
            report.errors += 1
            log.exception(
                "reconciler: the workers registry failed",
                extra={"action": "reconcile_workers_failed"},
            )

    def _requeue(self, now: float, report: TickReport) -> None:
        queued = [row for row in self.store.open_commands() if row.status == port.COMMAND_QUEUED]
        still = {row.command_id for row in queued}
        self._noticed = {cid: at for cid, at in self._noticed.items() if cid in still}
        stale = [
            row
            for row in queued
            if now - row.created_at >= self.requeue_after
            and now - self._noticed.get(row.command_id, 0.0) >= self.requeue_after
        ]
        if not stale:
            return
        try:
            report.cancelled = sorted(
                self.driver.settle_cancelled({row.execution_id for row in stale})
            )
        except Exception:
            report.errors += 1
            log.exception(
                "reconciler: settling cancelled executions failed",
                extra={"action": "reconcile_cancel_failed"},
            )
        notices = [
            notify.Notice(row.command_id, row.execution_id, row.pool)
            for row in stale
            if row.execution_id not in report.cancelled
        ]
        self.publisher.notify(notices)
        for notice in notices:
            self._noticed[notice.command_id] = now
            report.republished.append(notice.command_id)

    def _each(
        self, xids: Iterable[int], report: TickReport, action: Callable[[int], Any]
    ) -> list[int]:
        """Run `action` per execution; one broken execution must not stop the others."""
        done: list[int] = []
        for xid in xids:
            try:
                action(xid)
            except Exception:
                report.errors += 1
                log.exception(
                    "reconciler: execution %s failed",
                    xid,
                    extra={"action": "reconcile_failed", "execution_id": xid},
                )
                continue
            done.append(xid)
        return done


def still_expired(
    store: port.Store, rows: list[port.CommandRow], now: float
) -> list[port.CommandRow]:
    """Those of `rows` whose claim is, as read now, the same claim (epoch) and still past
    its lease end: a report, a release or a heartbeat since the first read takes it out."""
    fresh = store.get_commands([row.command_id for row in rows])
    out = []
    for row in rows:
        now_row = fresh.get(row.command_id)
        if (
            now_row is not None
            and now_row.status == port.COMMAND_CLAIMED
            and now_row.epoch == row.epoch
            and (now_row.lease_expires_at or 0) < now
        ):
            out.append(now_row)
    return out
