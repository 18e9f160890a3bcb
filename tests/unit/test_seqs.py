"""`store.seqs.SeqCache`: where each log ends as this store committed it, and the last
event that may change a decision (claims and releases move only the end)."""

from __future__ import annotations

from milepost.core import events as ev
from milepost.store.seqs import Held, SeqCache


def _event(xid: int, seq: int, etype: str = ev.COMMAND_COMPLETED) -> ev.Event:
    return ev.Event(seq * 100 + xid, xid, etype, 0.0, seq=seq)


def test_an_append_then_its_claims() -> None:
    seqs = SeqCache()
    seqs.committed([_event(1, 1), _event(1, 2), _event(2, 1), _event(1, 3, ev.COMMAND_CLAIMED)])
    assert seqs.get(1) == Held(3, 2) and seqs.get(2) == Held(1, 1)
    seqs.committed([_event(1, 4, ev.COMMAND_RELEASED)])  # right after: the decided one stays
    assert seqs.get(1) == Held(4, 2)


def test_a_claim_after_a_gap_leaves_the_decided_end_unknown() -> None:
    seqs = SeqCache()
    seqs.committed([_event(1, 1)])
    seqs.committed([_event(1, 3, ev.COMMAND_CLAIMED)])  # another writer took seq 2
    assert seqs.get(1) == Held(3, None)
    seqs.committed([_event(2, 5, ev.COMMAND_CLAIMED)])  # nothing known before it
    assert seqs.get(2) == Held(5, None)


def test_an_event_behind_the_end_forgets_it_and_a_repeat_changes_nothing() -> None:
    seqs = SeqCache()
    seqs.committed([_event(1, 1), _event(1, 2)])
    seqs.committed([_event(1, 2)])
    assert seqs.get(1) == Held(2, 2)
    seqs.committed([_event(1, 1)])  # a concurrent writer of this store committed past it
    assert seqs.get(1) is None
    seqs.committed([_event(1, 1), _event(1, 3), _event(1, 2)])  # forgotten, then again
    assert seqs.get(1) is None  # 2 came after 3: forgotten again
