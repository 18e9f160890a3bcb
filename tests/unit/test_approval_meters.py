"""Approval metrics: each outcome counted by label, with the time since its request, from
the events one engine call committed (or the log, for a request this process never saw)."""

from __future__ import annotations

from milepost.api.metrics import EngineMeters, Metrics
from milepost.core import events as ev
from milepost.engine.meters import ApprovalClock, Meters
from milepost.engine.orchestrator import Outcome
from milepost.store.memory import MemoryStore
from tests.shared import metric_sample

T0 = 1_764_600_000.0
XID = 42


class Recorded(Meters):
    def __init__(self) -> None:
        self.closed: list[tuple[str, float | None]] = []

    def approval_closed(self, outcome: str, seconds: float | None) -> None:
        self.closed.append((outcome, seconds))


def requested(approval_id: int, at: float) -> ev.Event:
    return ev.new_event(
        approval_id,
        XID,
        ev.APPROVAL_REQUESTED,
        at,
        step="refund",
        payload={
            "approval_id": approval_id,
            "run": 1,
            "quorum": 1,
            "approvers": ["user:alice"],
            "risk": "high",
        },
    )


def closing(event_id: int, event_type: str, approval_id: int | str, at: float) -> ev.Event:
    return ev.new_event(
        event_id, XID, event_type, at, step="refund", payload={"approval_id": approval_id, "run": 1}
    )


def test_each_outcome_is_counted_with_the_time_since_its_request() -> None:
    meters = Recorded()
    clock = ApprovalClock(meters, MemoryStore())
    clock(
        Outcome(
            events=[
                requested(1, T0),
                requested(2, T0 + 10),
                requested(3, T0 + 20),
                requested(4, T0 + 30),
            ]
        )
    )
    vote = ev.new_event(
        5,
        XID,
        ev.APPROVAL_DECIDED,
        T0 + 40,
        step="refund",
        status="INFO",
        payload={"approval_id": 1, "identity": "user:alice", "decision": "approve"},
    )
    clock(Outcome(events=[vote, closing(6, ev.APPROVAL_GRANTED, 1, T0 + 40)]))
    clock(
        Outcome(
            events=[
                closing(7, ev.APPROVAL_DENIED, 2, T0 + 70),
                closing(8, ev.APPROVAL_EXPIRED, 3, T0 + 20 + 86_400),
                closing(9, ev.APPROVAL_INVALIDATED, "4", T0 + 35),
            ]
        )
    )
    # a vote is not an outcome; the wire's string id counts as the id it spells
    assert meters.closed == [
        ("granted", 40.0),
        ("denied", 60.0),
        ("expired", 86_400.0),
        ("invalidated", 5.0),
    ]


def test_a_granted_approval_a_later_attempt_outlived_is_counted_once_as_granted() -> None:
    meters = Recorded()
    clock = ApprovalClock(meters, MemoryStore())
    refused = ev.new_event(
        3,
        XID,
        ev.APPROVAL_INVALIDATED,
        T0 + 500,
        step="refund",
        payload={"approval_id": 1, "run": 1, "index": -1, "attempt": 2, "cause": "expired"},
    )
    clock(Outcome(events=[requested(1, T0), closing(2, ev.APPROVAL_GRANTED, 1, T0 + 40)]))
    clock(Outcome(events=[refused]))
    assert meters.closed == [("granted", 40.0)]


def test_a_request_this_process_never_saw_is_read_from_the_store() -> None:
    store = MemoryStore()
    started = ev.new_event(
        100,
        XID,
        ev.EXECUTION_STARTED,
        T0 - 5,
        payload={"path": "examples/approval", "version": 1, "workload": {}},
    )
    store.append([started, requested(101, T0)])
    meters = Recorded()
    # a fresh clock: another server wrote the request, or this one restarted since
    clock = ApprovalClock(meters, store)
    clock(Outcome(events=[closing(102, ev.APPROVAL_GRANTED, 101, T0 + 3600)]))
    assert meters.closed == [("granted", 3600.0)]


def test_an_outcome_whose_request_is_nowhere_is_counted_without_a_time() -> None:
    meters = Recorded()
    clock = ApprovalClock(meters, MemoryStore())
    clock(
        Outcome(
            events=[
                closing(9, ev.APPROVAL_DENIED, 555, T0),
                closing(10, ev.APPROVAL_DENIED, "not an id", T0),
            ]
        )
    )
    assert meters.closed == [("denied", None), ("denied", None)]


def test_the_clock_forgets_the_oldest_requests_past_its_bound() -> None:
    meters = Recorded()
    clock = ApprovalClock(meters, MemoryStore(), keep=2)
    clock(Outcome(events=[requested(1, T0), requested(2, T0 + 1), requested(3, T0 + 2)]))
    clock(
        Outcome(
            events=[
                closing(4, ev.APPROVAL_GRANTED, 1, T0 + 9),
                closing(5, ev.APPROVAL_GRANTED, 3, T0 + 9),
            ]
        )
    )
    # the first was forgotten and is not in this (empty) log: counted, with no time
    assert meters.closed == [("granted", None), ("granted", 7.0)]


def test_the_server_exposes_the_decisions_by_outcome_and_the_time_histogram() -> None:
    metrics = Metrics()
    clock = ApprovalClock(EngineMeters(metrics), MemoryStore())
    clock(
        Outcome(
            events=[
                requested(1, T0),
                requested(2, T0),
                closing(3, ev.APPROVAL_GRANTED, 1, T0 + 120),
                closing(4, ev.APPROVAL_DENIED, 2, T0 + 7200),
            ]
        )
    )
    text = metrics.exposition().decode()
    name = "milepost_approval_decisions_total"
    assert metric_sample(text, name, outcome="granted") == 1
    assert metric_sample(text, name, outcome="denied") == 1
    assert metric_sample(text, name, outcome="expired") == 0  # shown before it first happens
    assert metric_sample(text, name, outcome="invalidated") == 0
    hist = "milepost_approval_time_to_decision_seconds"
    assert metric_sample(text, hist + "_count") == 2
    assert metric_sample(text, hist + "_sum") == 7320
    assert metric_sample(text, hist + "_bucket", le="300.0") == 1
    assert metric_sample(text, hist + "_bucket", le="3600.0") == 1
    assert metric_sample(text, hist + "_bucket", le="14400.0") == 2
