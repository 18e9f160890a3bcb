"""The engine's one clock: everything that happens because time passed, in both modes.

Two things are due on it:

- timers, `(due time, kind, key)`: one-off, each kind fired through the one handler
  registered for it (`on`). The engine's decisions set the kind `WAKE` on a run
  (`Outcome.wake_at`, `Lifecycle.on_wake`): a retry's delay, the end of a cancel's grace,
  an approval's expiry; its handler wakes the run (`Lifecycle.wake` on a server, the
  embedded engine's `_wake` for the runs it drives). A new kind (a schedule's fire) is
  one more `on` and its `at`s.
- duties, `(name, every)`: what is done every so often (`every`): on a server the
  reconciler's tick (lease expiry, liveness and `stall_after`, the engine's
  `default_timeout`, re-published wake-ups, settled cancels, re-drives); in the embedded
  engine its poll of the runs it drives (what other processes wrote, lease expiry and
  liveness of its own runs, settled cancels) and its driver leases.

`step(now)` does what is due at `now`: tests call it with the time they set, no sleep.
`run` is the asyncio driver: it steps, then sleeps until the next due time (a timer set
sooner wakes it; at most `LONGEST_SLEEP`, so a clock that jumps is read again soon), in
the loop's own thread (the embedded engine, which calls its engine from its loop only)
or through `offload` (the server: the store's calls block).

What one handler or duty raises is logged and the loop goes on: a crash here would stop
every lease expiry. Timers live in memory: a restarted server finds its runs' timers
again by re-deciding every running run (`Lifecycle.recover`), the embedded engine by
`resume`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

WAKE = "wake"
"""A run's own timer (retry, cancel grace, approval expiry): the key is its execution id."""
LONGEST_SLEEP = 1.0
"""The driver reads the clock again at least this often (seconds)."""

Offload = Callable[[Callable[[float], object], float], Awaitable[object]]
"""Runs `step(now)` in a thread and awaits it (`starlette.concurrency.run_in_threadpool`)."""


@dataclass(slots=True)
class _Duty:
    name: str
    every: float
    act: Callable[[float], object]
    next_at: float | None = None
    """None: not started; the first step sets it one period on (a duty waits before its
    first turn, as a loop that sleeps first)."""


class Clock:
    """The timer queue and the periodic duties, on the injected `now`. Timers may be set
    from any thread; `step` and `run` are called from one place at a time."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self._heap: list[tuple[float, str, int]] = []
        self._set: set[tuple[float, str, int]] = set()
        self._lock = threading.Lock()
        self._kinds: dict[str, Callable[[int], object]] = {}
        self._duties: dict[str, _Duty] = {}
        self._target = math.inf
        """When the driver's sleep ends (inf: no driver, or not asleep)."""
        self._nudge: Callable[[], None] | None = None
        """Wakes the sleeping driver (set while `run` runs)."""

    # -- registrations ---------------------------------------------------------------------

    def on(self, kind: str, fire: Callable[[int], object]) -> None:
        """Fire every due timer of `kind` through `fire(key)` (one handler a kind: a later
        registration replaces the earlier one; a transport's own over the engine's)."""
        self._kinds[kind] = fire

    def every(self, name: str, seconds: float, act: Callable[[float], object]) -> None:
        """Call `act(now)` every `seconds` (one duty a name), the first time one period
        after the clock's first step."""
        if not seconds > 0:  # also NaN: the driver would spin
            raise ValueError(f"duty {name!r}: a period must be positive seconds, not {seconds}")
        self._duties[name] = _Duty(name, seconds, act)

    # -- timers ----------------------------------------------------------------------------

    def at(self, kind: str, key: int, when: float) -> None:
        """Fire `kind` for `key` at `when` (thread-safe; the same timer twice is one)."""
        entry = (when, kind, key)
        with self._lock:
            if entry in self._set:
                return
            self._set.add(entry)
            heapq.heappush(self._heap, entry)
            sooner = when < self._target
        nudge = self._nudge
        if sooner and nudge is not None:
            nudge()

    def drop(self, kind: str, key: int) -> None:
        """Forget the timers of `kind` for `key` (a run that ended, or that another
        process drives now)."""
        with self._lock:
            if not self._heap:  # most runs end with no timer set
                return
            kept = [entry for entry in self._heap if not (entry[1] == kind and entry[2] == key)]
            if len(kept) != len(self._heap):
                heapq.heapify(kept)
                self._heap = kept
                self._set = set(kept)

    def pending(self, kind: str) -> list[tuple[float, int]]:
        """The timers of `kind` not fired yet, as (due time, key), soonest first."""
        with self._lock:
            return sorted((at, key) for at, k, key in self._heap if k == kind)

    def due(self, kind: str, now: float) -> list[int]:
        """Take the timers of `kind` due at `now`: their keys, each once, soonest first
        (for a caller that fires them itself: the reconciler's tick)."""
        with self._lock:
            taken = sorted(e for e in self._heap if e[1] == kind and e[0] <= now)
            if taken:
                self._set.difference_update(taken)
                self._heap = [e for e in self._heap if e in self._set]
                heapq.heapify(self._heap)
        keys: list[int] = []
        for _, _, key in taken:
            if key not in keys:
                keys.append(key)
        return keys

    # -- stepping --------------------------------------------------------------------------

    def step(self, now: float) -> dict[str, list[int]]:
        """Fire the timers due at `now` (kind by kind, soonest first; a kind without a
        handler stays queued), then the duties whose turn it is. Returns the keys fired,
        by kind."""
        fired = self._take(now, set(self._kinds))
        for kind, keys in fired.items():
            fire = self._kinds[kind]
            for key in keys:
                try:
                    fire(key)
                except Exception:
                    log.exception(
                        "clock: the %s timer of %s failed",
                        kind,
                        key,
                        extra={"action": "timer_failed", "kind": kind, "key": key},
                    )
        for duty in list(self._duties.values()):
            if duty.next_at is None:
                duty.next_at = now + duty.every
                continue
            # its turn, or a clock set back by more than a period (else it waits that long)
            if now < duty.next_at and duty.next_at - now <= duty.every:
                continue
            duty.next_at = now + duty.every
            try:
                duty.act(now)
            except Exception:
                log.exception(
                    "clock: %s failed", duty.name, extra={"action": f"{duty.name}_failed"}
                )
        return fired

    def _take(self, now: float, handled: set[str]) -> dict[str, list[int]]:
        taken: dict[str, list[int]] = {}
        kept: list[tuple[float, str, int]] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now:
                entry = heapq.heappop(self._heap)
                if entry[1] not in handled:
                    kept.append(entry)  # no handler yet: left for whoever takes it
                    continue
                self._set.discard(entry)
                keys = taken.setdefault(entry[1], [])
                if entry[2] not in keys:
                    keys.append(entry[2])
            for entry in kept:
                heapq.heappush(self._heap, entry)
        return taken

    def next_due(self) -> float | None:
        """The soonest due time of a timer or a duty (None: nothing is due ever)."""
        with self._lock:
            soonest = self._heap[0][0] if self._heap else math.inf
        for duty in self._duties.values():
            if duty.next_at is not None:
                soonest = min(soonest, duty.next_at)
        return None if soonest == math.inf else soonest

    # -- the driver ------------------------------------------------------------------------

    async def run(self, offload: Offload | None = None) -> None:
        """Step, then sleep until the next due time, until cancelled. `offload`: how a
        step runs off the loop's thread (a thread pool); None: on it."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def nudge() -> None:
            loop.call_soon_threadsafe(woken.set)

        self._nudge = nudge
        try:
            while True:
                now = self.now()
                if offload is None:
                    self.step(now)
                else:
                    await offload(self.step, now)
                woken.clear()
                due = self.next_due()
                delay = LONGEST_SLEEP if due is None else due - self.now()
                delay = min(LONGEST_SLEEP, delay)
                if delay <= 0:
                    await asyncio.sleep(0)  # others get a turn between two steps
                    continue
                with self._lock:
                    self._target = self.now() + delay
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), delay)
                with self._lock:
                    self._target = math.inf
        finally:
            self._nudge = None
            self._target = math.inf
