"""Who waits for a run to end: the status long-poll, woken at once when the engine ends it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable

from milepost.core import state as st


class Watchers:
    def __init__(self) -> None:
        self._waiters: dict[int, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._lock = threading.Lock()

    def watch(
        self, execution_id: int, loop: asyncio.AbstractEventLoop, event: asyncio.Event
    ) -> None:
        """Set `event` (on `loop`, from whichever thread ends the run) when the engine
        finishes `execution_id`. Runs ended elsewhere are not seen: callers re-check."""
        with self._lock:
            self._waiters.setdefault(execution_id, []).append((loop, event))

    def unwatch(self, execution_id: int, event: asyncio.Event) -> None:
        with self._lock:
            waiters = [w for w in self._waiters.get(execution_id, ()) if w[1] is not event]
            if waiters:
                self._waiters[execution_id] = waiters
            else:
                self._waiters.pop(execution_id, None)

    def wake(self, finished: Iterable[st.ExecutionState]) -> None:
        with self._lock:
            woken = [w for state in finished for w in self._waiters.pop(state.execution_id, ())]
        for loop, event in woken:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits on it any more
                loop.call_soon_threadsafe(event.set)

    def __len__(self) -> int:
        """Executions someone waits for."""
        with self._lock:
            return len(self._waiters)
