"""How both clients read a run over many replies: the pages of its log, and the
long-polls of its status until it ends."""

from __future__ import annotations

import time
from typing import Any

from milepost.client.errors import WaitTimeout

TERMINAL_STATUSES = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
EVENTS_PAGE = 1000
WAIT_LONG_POLL = 30.0
"""Longest `wait` the client asks `GET /api/executions/{id}/status` to hold a reply (the
server takes up to 60 s); a long-poll is asked again until the run ends or time is up."""
WAIT_FIRST_POLL = 0.05
WAIT_MAX_POLL = 1.0
"""Back-off between asks when the server answers at once (one that ignores `wait`)."""


def wait_timeout(
    execution_id: int | str, status: dict[str, Any], timeout: float | None
) -> WaitTimeout:
    return WaitTimeout(
        f"execution {execution_id} is still {status.get('status')} after {timeout or 0:g}s",
        execution_id=str(execution_id),
    )


class WaitPlan:
    """How `wait` long-polls, for both clients: what `wait` to ask, how long to pause.

    Each ask holds on the server until the run ends or `min(time left, WAIT_LONG_POLL)`
    passes, so the end is seen as soon as the server sees it. A reply that is not terminal
    and came back in much less than the wait asked is from a server that ignores `wait`:
    then pause with back-off (as the client did before long-polls) so it never busy-loops.
    """

    def __init__(self, timeout: float | None) -> None:
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.delay = WAIT_FIRST_POLL
        self.asked = 0.0
        self.sent_at = 0.0

    def ask(self) -> float:
        """The `wait` of the next status call."""
        self.sent_at = time.monotonic()
        left = WAIT_LONG_POLL if self.deadline is None else self.deadline - self.sent_at
        self.asked = max(0.0, min(left, WAIT_LONG_POLL))
        return self.asked

    def pause(self) -> float | None:
        """Seconds to sleep before asking again (the reply was not terminal); None: time's up."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            return None
        if now - self.sent_at >= self.asked / 2:  # the server held the reply: ask again now
            self.delay = WAIT_FIRST_POLL
            return 0.0
        pause = self.delay
        self.delay = min(self.delay * 2, WAIT_MAX_POLL)
        return pause if self.deadline is None else min(pause, self.deadline - now)


def events_page(body: dict[str, Any]) -> list[dict[str, Any]]:
    return list(body.get("events") or [])


def next_after(body: dict[str, Any]) -> int | None:
    """The `events_after` of the next page, None after the last one.

    The server says `events_next` (the seq to continue after); without it a full page
    means there may be more, continued after the seq of its last event.
    """
    if "events_next" in body:
        nxt = body["events_next"]
        return None if nxt is None else int(nxt)
    page = events_page(body)
    if len(page) < EVENTS_PAGE or page[-1].get("seq") is None:
        return None
    return int(page[-1]["seq"])
