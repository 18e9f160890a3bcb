"""What the mock API's endpoints remember between requests: `/flaky` attempts, the
`/rate-limited` window, the concurrency probe's counters and recent events."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from milepost.conformance.mock_api.data import DEFAULT_MAX_EVENTS


class MockState:
    """All mutable state of one application instance; every update holds one lock."""

    def __init__(
        self,
        *,
        max_events: int = DEFAULT_MAX_EVENTS,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._wall_clock = wall_clock
        self._flaky_attempts: dict[int, int] = {}
        self._rate_window: deque[float] = deque()
        self._started = 0
        self._completed = 0
        self._active = 0
        self._max_active = 0
        self._events: deque[dict[str, Any]] = deque(maxlen=max_events)

    # -- /flaky -------------------------------------------------------------------------------

    def flaky_attempt(self, page: int) -> int:
        """Count one more attempt at ``page``; returns the new count."""
        with self._lock:
            count = self._flaky_attempts.get(page, 0) + 1
            self._flaky_attempts[page] = count
            return count

    def flaky_attempts(self) -> dict[int, int]:
        with self._lock:
            return dict(self._flaky_attempts)

    def flaky_reset(self) -> None:
        with self._lock:
            self._flaky_attempts.clear()

    # -- /rate-limited ------------------------------------------------------------------------

    def rate_limit_admit(self, requests_per_second: int) -> tuple[bool, int, int]:
        """Apply the one-second sliding window.

        Returns ``(accepted, requests_in_window, retry_after)``; ``requests_in_window`` counts
        the window after adding an accepted request, ``retry_after`` only matters when the
        request is rejected.
        """
        with self._lock:
            now = self._clock()
            window = self._rate_window
            while window and now - window[0] > 1.0:
                window.popleft()
            if len(window) >= requests_per_second:
                oldest = window[0] if window else now
                retry_after = max(1, math.floor(1 - (now - oldest)) + 1)
                return False, len(window), retry_after
            window.append(now)
            return True, len(window), 0

    # -- concurrency probe --------------------------------------------------------------------

    def probe_start(self, label: str, delay_seconds: float) -> tuple[int, int]:
        """Register an arriving probe; returns ``(request_id, active_at_start)``."""
        with self._lock:
            self._started += 1
            request_id = self._started
            self._active += 1
            self._max_active = max(self._max_active, self._active)
            self._events.append(
                {
                    "phase": "start",
                    "request_id": request_id,
                    "label": label,
                    "delay_seconds": delay_seconds,
                    "ts": self._wall_clock(),
                    "active": self._active,
                }
            )
            return request_id, self._active

    def probe_end(self, request_id: int, label: str, duration_seconds: float) -> dict[str, int]:
        """Register a finished probe; returns the counters right after the update."""
        with self._lock:
            self._active = max(0, self._active - 1)
            self._completed += 1
            self._events.append(
                {
                    "phase": "end",
                    "request_id": request_id,
                    "label": label,
                    "duration_seconds": duration_seconds,
                    "ts": self._wall_clock(),
                    "active": self._active,
                }
            )
            return self._counters()

    def probe_abort(self) -> None:
        """A probe was cancelled mid-sleep (server shutdown): it is no longer active."""
        with self._lock:
            self._active = max(0, self._active - 1)

    def concurrency_stats(self) -> dict[str, Any]:
        with self._lock:
            return {**self._counters(), "recent_events": [dict(e) for e in self._events]}

    def concurrency_reset(self) -> None:
        with self._lock:
            self._started = self._completed = self._active = self._max_active = 0
            self._events.clear()

    def _counters(self) -> dict[str, int]:
        return {
            "started": self._started,
            "completed": self._completed,
            "active": self._active,
            "max_active": self._max_active,
        }
