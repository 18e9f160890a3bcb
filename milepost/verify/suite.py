"""One verify run: start the installation, place the orders and inject the faults of the
schedule, heal everything, wait for every run to end (or the deadline), then collect the
evidence for the checks."""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milepost.client import MilepostClient, ServerRefused, ServerUnavailable
from milepost.core import events as ev
from milepost.store.factory import open_store
from milepost.verify import catalog, checks, effects, journal, zombie
from milepost.verify.schedule import KILL, PAUSE, SERVER, ZOMBIE, Fault, Order, Schedule
from milepost.verify.supervisor import Installation

TICK = 0.1
"""Seconds between two turns of the suite's loop (approvals, due actions, progress)."""
CALL_TIMEOUT = 3.0
"""Seconds the suite waits for its server (paused, it answers nothing): tried again."""
TRANSIENT = (ServerUnavailable, OSError)
"""What a call to a killed or paused server raises: tried again on a later turn."""


@dataclass(slots=True)
class Options:
    db_url: str
    workdir: Path
    runs: int = 20
    seed: int = 1
    duration: float = 30.0
    """Seconds of faults; the orders start over its first half."""
    deadline: float = 120.0
    """Seconds after the faults end within which every run must have ended."""
    workers: int = 2
    lease: float = 3.0
    server_env: dict[str, str] = field(default_factory=dict)
    """Extra environment of every process (`MILEPOST_FAULT_SKIP_FENCE=1` in a test)."""


@dataclass(slots=True)
class Outcome:
    schedule: Schedule
    evidence: checks.Evidence
    injected: dict[str, int]
    """Fault kind -> how many were injected (`kill server`, `pause worker`, `zombie`...)."""
    zombies_fenced: int
    seconds: float


Progress = Callable[[int, int, str], None]
"""(runs ended, runs placed, what happened last)."""


class Suite:
    def __init__(self, options: Options, schedule: Schedule, site: Installation,
                 progress: Progress) -> None:  # fmt: skip
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

    def close(self) -> None:
        self.admin.close()
        self.approver.close()

    # -- the run --------------------------------------------------------------------------

    def run(self) -> None:
        self._retrying(lambda: [self.admin.register(text) for text in catalog.texts()])
        effects.create(self.where)
        start = time.monotonic()
        # the faults on their own thread: a call to a paused server blocks this one
        chaos = threading.Thread(target=self._chaos, args=(start,), name="verify-chaos",
                                 daemon=True)  # fmt: skip
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
                    self.approver.decide(item["approval_id"], "approve", "the verify suite")
        with contextlib.suppress(*TRANSIENT, ServerRefused):
            for row in self.admin.executions(path=checks.ORDER_PATH, limit=1000):
                if row.get("status") in ("COMPLETED", "FAILED", "CANCELLED"):
                    self.ended.add(int(row["execution_id"]))
        self.progress(len(self.ended & set(self.placed)), len(self.schedule.orders), self._last)

    def _all_ended(self) -> bool:
        return set(self.placed) <= self.ended

    def _place(self, order: Order, index: int) -> bool:
        workload = {**order.workload(self.where), "order": index}
        try:
            xid = self.admin.execute(checks.ORDER_PATH, workload)
        except TRANSIENT:
            return False  # the server is down: on a later turn
        self.placed[int(xid)] = order
        return True

    def _inject(self, fault: Fault, start: float) -> None:
        name = f"{fault.what} {'server' if fault.target == SERVER else 'worker'}"
        if fault.what == ZOMBIE:
            name = ZOMBIE
            if not self.site.processes[SERVER].alive() or self.site.processes[SERVER].paused:
                return  # it would only wait: the faults after it must keep their moments
            with contextlib.suppress(*TRANSIENT, ServerRefused):
                haunting = zombie.haunt_once(self.site.url, self.site.worker_token)
                self.hauntings.append(haunting)
                if haunting.event_id is not None:
                    self.reported.add(haunting.event_id)
        else:
            proc = self.site.processes[fault.target]
            if not proc.alive() or proc.paused:
                return  # already down: this fault would add nothing
            back = time.monotonic() - start + fault.hold
            if fault.what == KILL:
                proc.kill()
                self.at(back, lambda: self.site.restart(fault.target))
            elif fault.what == PAUSE:
                proc.pause()
                self.at(back, proc.resume)
        self.injected[name] = self.injected.get(name, 0) + 1
        self._last = f"{name} ({fault.target}) at {fault.at:.1f}s"

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
        """Read once every process has stopped: the log as it will stay."""
        store = open_store(self.o.db_url)
        try:
            logs = {row.execution_id: store.load(row.execution_id) for row in _every(store)}
        finally:
            store.close()
        expected: dict[int, str] = {}
        for xid, log in logs.items():
            started = log[0] if log and log[0].event_type == ev.EXECUTION_STARTED else None
            index = (started.payload.get("workload") or {}).get("order") if started else None
            if checks._path(log) == checks.ORDER_PATH and isinstance(index, int):
                expected[xid] = self.schedule.orders[index].expected  # a start retried too
        reported = self.reported | journal.read(self.site.journals())
        return checks.Evidence(logs, expected, effects.read(self.where), reported,
                               self.unstarted)  # fmt: skip


def _every(store: Any) -> Iterator[Any]:
    offset = 0
    while True:
        rows = store.list_executions(limit=500, offset=offset)
        yield from rows
        if len(rows) < 500:
            return
        offset += len(rows)


def run(options: Options, schedule: Schedule, progress: Progress) -> Outcome:
    started = time.monotonic()
    with Installation(options.db_url, options.workdir, workers=options.workers,
                      lease=options.lease, extra_env=options.server_env) as site:  # fmt: skip
        suite = Suite(options, schedule, site, progress)
        try:
            suite.run()
        finally:
            suite.close()
    evidence = suite.evidence()
    fenced = sum(1 for h in suite.hauntings if h.event_id is not None and h.stale)
    return Outcome(schedule, evidence, suite.injected, fenced, time.monotonic() - started)
