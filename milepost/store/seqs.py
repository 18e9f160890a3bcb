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


@dataclass(slots=True)
class Held:
    """Replaced, never changed (not frozen: a frozen dataclass is several times slower to
    make, and one is made per append and execution)."""

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
            # execution -> (last, decided) so far, one entry made per execution at the end
            ends: dict[int, tuple[int, int | None] | None] = {}
            for event in events:  # every event of every append: one loop, no call an event
                xid = event.execution_id
                if xid in ends:
                    end = ends[xid]
                else:
                    held = self._held.get(xid)
                    end = None if held is None else (held.last, held.decided)
                seq = event.seq
                if end is not None and end[0] >= seq:
                    # a concurrent writer of this store committed past it: forget the end
                    end = None if end[0] > seq else end
                elif event.event_type not in ev.CLAIM_EVENTS:
                    # numbered right after the log's end (the index saw to it): nothing
                    # after it may change a decision
                    end = (seq, seq)
                else:  # a claim moves the end only, and keeps `decided` where contiguous
                    end = (seq, end[1] if end is not None and end[0] == seq - 1 else None)
                ends[xid] = end
            for xid, end in ends.items():
                if end is None:
                    self._held.pop(xid, None)
                else:
                    self._held[xid] = Held(*end)
