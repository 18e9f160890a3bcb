"""Which events `milepost events --step --type --tail` and its route show (`engine.event_query`)."""

from __future__ import annotations

from milepost.core import events as ev
from milepost.engine.event_query import EventQuery, select, types_of


def _log() -> list[ev.Event]:
    kinds = [
        (ev.EXECUTION_STARTED, None),
        (ev.STEP_ENTER, "a"),
        (ev.COMMAND_ISSUED, "a"),
        (ev.COMMAND_CLAIMED, "a"),
        (ev.COMMAND_COMPLETED, "a"),
        (ev.STEP_EXIT, "a"),
        (ev.STEP_ENTER, "b"),
        (ev.COMMAND_ISSUED, "b"),
    ]
    return [
        ev.Event(
            event_id=100 + i,
            execution_id=1,
            event_type=kind,
            created_at=float(i),
            step=step,
            seq=i + 1,
        )
        for i, (kind, step) in enumerate(kinds)
    ]


def _types(events: list[ev.Event]) -> list[str]:
    return [e.event_type for e in events]


def test_a_family_a_type_and_a_step_select_their_events() -> None:
    log = _log()
    command_a = select(log, EventQuery("a", ("command",)), limit=100)
    assert _types(command_a.events) == [ev.COMMAND_ISSUED, ev.COMMAND_CLAIMED, ev.COMMAND_COMPLETED]
    assert command_a.next_after is None and command_a.last_seq == 8
    both = select(log, EventQuery(None, types_of(["step.enter, execution.started"])), limit=100)
    assert _types(both.events) == [ev.EXECUTION_STARTED, ev.STEP_ENTER, ev.STEP_ENTER]
    # `step` names a family only without a dot: `step.e` is no type
    assert select(log, EventQuery(types=("step.e",)), limit=100).events == []


def test_pages_continue_after_their_last_event_and_tail_takes_the_last() -> None:
    log = _log()
    first = select(log, EventQuery(), limit=3)
    assert [e.seq for e in first.events] == [1, 2, 3] and first.next_after == 3
    rest = select([e for e in log if e.seq > 3], EventQuery(), limit=10, after=3)
    assert [e.seq for e in rest.events] == [4, 5, 6, 7, 8] and rest.next_after is None
    assert [e.seq for e in select(log, EventQuery("b"), limit=1, tail=1).events] == [8]
    assert select(log, EventQuery(), limit=1, tail=0).events == []
    # nothing new: a follower stays where it was
    assert select([], EventQuery(), limit=10, after=8).last_seq == 8
