"""One verify run: start the installation, place the orders and inject the faults of the
schedule, heal everything, wait for every run to end (or the deadline), then collect the
evidence for the checks."""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milepost.client import MilepostClient, ServerRefused, ServerUnavailable
from milepost.client.polling import TERMINAL_STATUSES
from milepost.store.factory import open_store
from milepost.verify import catalog, checks, effects, journal, zombie
from milepost.verify.schedule import KILL, PAUSE, SERVER, ZOMBIE, Fault, Order, Schedule
from milepost.verify.supervisor import Installation

TICK = 0.1
"""Seconds between two turns of the suite's loop (approvals, due actions, progress)."""
ZOMBIE_AGAIN = 1.0
"""Seconds before a zombie that could not claim anything tries again."""
CALL_TIMEOUT = 3.0
"""Seconds the suite waits for its server (paused, it answers nothing): tried again."""
TRANSIENT = (ServerUnavailable, OSError)
"""What a call to a killed or paused server raises: tried again on a later turn."""


@dataclass(slots=True)
class Options:
    db_url: str
    workdir: Path
    duration: float = 30.0
    """Seconds of faults; the orders start over its first half."""
    deadline: float = 120.0
    """Seconds after the faults end within which every run must have ended."""
    workers: int = 2
    lease: float = 3.0


@dataclass(slots=True)
class VerifyResult:
    """What one `milepost verify` run found: its evidence and the faults it injected (not the
    orchestrator's `Outcome` of one call)."""

    schedule: Schedule
    evidence: checks.Evidence
    injected: dict[str, int]
    """Fault kind -> how many were injected (`kill server`, `pause worker`, `zombie`...)."""
    zombies_fenced: int
    seconds: float


Progress = Callable[[int, int, str], None]
"""(runs ended, runs placed, what happened last)."""


class Suite:
    def __init__(
        self, options: Options, schedule: Schedule, site: Installation, progress: Progress
    ) -> None:
        self.o = options
        self.schedule = schedule
        self.site = site
        self.progress = progress
        self.where = effects.location(options.db_url)
        self.admin = MilepostClient(site.url, site.admin_token, timeout=CALL_TIMEOUT)
        self.approver = MilepostClient(site.url, site.approver_token, timeout=CALL_TIMEOUT)
        self.placed: dict[int, Order] = {}
        self.ended: set[int] = set()
        self.injected: dict[str, int] = {}
        self.hauntings: list[zombie.Haunting] = []
        self.reported: set[int] = set()
        self._timeline: list[tuple[float, int, Callable[[], None]]] = []
        self._n = itertools.count()
        self._last = "starting"
        self.unstarted = 0
        self.tag = secrets.token_hex(4)
        """In the workload of this suite's orders: the checks read only its runs."""

    def close(self) -> None:
        self.admin.close()
        self.approver.close()

    # -- the run --------------------------------------------------------------------------

    def run(self) -> None:
        self._retrying(lambda: [self.admin.register(text) for text in catalog.texts()])
        effects.create(self.where)
        start = time.monotonic()
        # the faults on their own thread: a call to a paused server blocks this one
        chaos = threading.Thread(
            target=self._chaos, args=(start,), name="verify-chaos", daemon=True
        )
        chaos.start()
        waiting = list(self.schedule.orders)
        chaos_ends = start + self.o.duration
        while waiting or time.monotonic() < chaos_ends:
            now = time.monotonic() - start
            while waiting and waiting[0].at <= now and self._place(waiting[0], len(self.placed)):
                waiting.pop(0)
            self._turn()
            if time.monotonic() > chaos_ends + self.o.deadline:
                break  # the server never came back for the orders left: unstarted
            time.sleep(TICK)
        self.unstarted = len(waiting)
        chaos.join()
        self.site.heal()
        self._last = "faults over: waiting for every run to end"
        end = time.monotonic() + self.o.deadline
        while time.monotonic() < end and not self._all_ended():
            self._turn()
            time.sleep(TICK)

    def _chaos(self, start: float) -> None:
        """Inject each fault at its moment, and undo it `hold` seconds later."""
        for fault in self.schedule.faults:
            self.at(fault.at, functools.partial(self._inject, fault, start))
        timeline = self._timeline
        while timeline:
            wait = timeline[0][0] - (time.monotonic() - start)
            if wait > 0:
                time.sleep(min(wait, TICK))
                continue
            heapq.heappop(timeline)[2]()

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._timeline, (when, next(self._n), action))

    def _turn(self) -> None:
        """Approve what waits for the suite's approver, note the runs that ended."""
        with contextlib.suppress(*TRANSIENT, ServerRefused):
            for item in self.approver.approvals(status="pending", limit=100).get("items", []):
                with contextlib.suppress(ServerRefused):  # decided meanwhile
                    self.approver.decide_approval(
                        item["approval_id"], "approve", "the verify suite"
                    )
        with contextlib.suppress(*TRANSIENT, ServerRefused):
            for row in self.admin.executions(path=checks.ORDER_PATH, limit=1000):
                if row.get("status") in TERMINAL_STATUSES:
                    self.ended.add(int(row["execution_id"]))
        self.progress(len(self.ended & set(self.placed)), len(self.schedule.orders), self._last)

    def _all_ended(self) -> bool:
        return set(self.placed) <= self.ended

    def _place(self, order: Order, index: int) -> bool:
        workload = {**order.workload(self.where), "order": index, "verify": self.tag}
        try:
            xid = self.admin.execute(checks.ORDER_PATH, workload)
        except TRANSIENT:
            return False  # the server is down: on a later turn
        self.placed[int(xid)] = order
        return True

    def _inject(self, fault: Fault, start: float) -> None:
        now = time.monotonic() - start
        if fault.what == ZOMBIE:
            if not self._haunt():
                if now + ZOMBIE_AGAIN < self.o.duration:
                    # the server was down, or nothing was queued: again a bit later
                    self.at(now + ZOMBIE_AGAIN, functools.partial(self._inject, fault, start))
                return
            name = ZOMBIE
        else:
            name = f"{fault.what} {'server' if fault.target == SERVER else 'worker'}"
            proc = self.site.processes[fault.target]
            if not proc.alive() or proc.paused:
                return  # already down: this fault would add nothing
            if fault.what == KILL:
                proc.kill()
                self.at(now + fault.hold, functools.partial(self.site.restart, fault.target))
            elif fault.what == PAUSE:
                proc.pause()
                self.at(now + fault.hold, proc.resume)
        self.injected[name] = self.injected.get(name, 0) + 1
        self._last = f"{name} ({fault.target}) at {now:.1f}s"

    def _haunt(self) -> bool:
        """The zombie's report, if it claimed something; False when it could not."""
        server = self.site.processes[SERVER]
        if not server.alive() or server.paused:
            return False  # it would only wait: the faults after it must keep their moments
        try:
            haunting = zombie.haunt_once(self.site.url, self.site.worker_token)
        except (*TRANSIENT, ServerRefused):
            return False
        if haunting.event_id is None:
            return False
        self.hauntings.append(haunting)
        self.reported.add(haunting.event_id)
        return True

    def _retrying(self, call: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + 60
        while True:
            try:
                return call()
            except TRANSIENT:
                if time.monotonic() > deadline:
                    raise
                time.sleep(TICK)

    # -- the evidence ----------------------------------------------------------------------

    def evidence(self) -> checks.Evidence:
        """Read once every process has stopped: the log as it will stay. Only this suite's
        runs: its orders (by the tag in their workload) and their children."""
        store = open_store(self.o.db_url)
        try:
            rows = list(_every(store))
            logs = {
                row.execution_id: store.load(row.execution_id)
                for row in rows
                if row.path == checks.ORDER_PATH
            }
            expected: dict[int, str] = {}
            for xid, log in list(logs.items()):
                workload = (log[0].payload.get("workload") or {}) if log else {}
                if workload.get("verify") != self.tag:
                    del logs[xid]  # another suite's, on the same database
                elif isinstance(index := workload.get("order"), int):
                    expected[xid] = self.schedule.orders[index].expected  # a start retried too
            logs.update(
                {
                    row.execution_id: store.load(row.execution_id)
                    for row in rows
                    if row.parent_execution_id in expected
                }
            )
        finally:
            store.close()
        reported = self.reported | journal.read(self.site.journals())
        return checks.Evidence(logs, expected, effects.read(self.where), reported, self.unstarted)


def _every(store: Any) -> Iterator[Any]:
    offset = 0
    while True:
        rows = store.list_executions(limit=500, offset=offset)
        yield from rows
        if len(rows) < 500:
            return
        offset += len(rows)


def run(options: Options, schedule: Schedule, progress: Progress) -> VerifyResult:
    started = time.monotonic()
    with Installation(
        options.db_url, options.workdir, workers=options.workers, lease=options.lease
    ) as site:
        suite = Suite(options, schedule, site, progress)
        try:
            suite.run()
        finally:
            suite.close()
    evidence = suite.evidence()
    fenced = sum(1 for h in suite.hauntings if h.event_id is not None and h.stale)
    return VerifyResult(schedule, evidence, suite.injected, fenced, time.monotonic() - started)
