"""Where each execution's log ends, as this store last committed it: appends number their
events from here without reading, and the unique (execution_id, seq) index refuses them
when another writer moved the log since (the caller then reads and retries).

An entry describes a prefix of the log that exists: `last`, its last seq, and `decided`,
the seq of its last event that may change a decision (None: not known, so an append with
`expect` reads). Claims and releases (`ev.CLAIM_EVENTS`) move `last` only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from milepost.core import events as ev

MAX_HELD = 100_000
"""Entries kept at most (one per live execution of this process in practice)."""


@dataclass(frozen=True, slots=True)
class Held:
    last: int
    decided: int | None


class SeqCache:
    def __init__(self) -> None:
        self._held: dict[int, Held] = {}
        self._mutex = threading.Lock()

    def get(self, execution_id: int) -> Held | None:
        return self._held.get(execution_id)

    def forget(self, execution_ids: Iterable[int]) -> None:
        with self._mutex:
            for xid in execution_ids:
                self._held.pop(xid, None)

    def clear(self) -> None:
        with self._mutex:
            self._held.clear()

    def committed(self, events: Sequence[ev.Event]) -> None:
        """Events committed (in seq order per execution): an append's, then its claims'."""
        with self._mutex:
            if len(self._held) > MAX_HELD:
                self._held.clear()
            for event in events:
                self._one(event)

    def _one(self, event: ev.Event) -> None:
        xid, seq = event.execution_id, event.seq
        held = self._held.get(xid)
        if held is not None and held.last >= seq:
            if held.last > seq:  # a concurrent writer of this store committed past it
                self._held.pop(xid, None)
            return
        contiguous = held is not None and held.last == seq - 1
        if event.event_type not in ev.CLAIM_EVENTS:
            # numbered right after the log's end (the index saw to it): nothing after it
            self._held[xid] = Held(seq, seq)
        elif contiguous:
            assert held is not None
            self._held[xid] = Held(seq, held.decided)
        else:
            self._held[xid] = Held(seq, None)
