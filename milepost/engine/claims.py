"""The claims an engine handed out, remembered so that their reports take the fast path."""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence

from milepost.core import events as ev
from milepost.store import port

HANDED_OUT_KEPT = 100_000
"""Claims `HandedOut` remembers; past it the oldest go (their reports take the careful
path: one more read)."""


class HandedOut:
    """The claims this engine handed out lately: command id -> (execution id, epoch).

    A worker's report normally comes back to the engine that handed its command out, with
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
