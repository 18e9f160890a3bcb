"""The verify suite's pure parts: the schedule is its seed's, and the invariants find what
they are for in small hand-made logs."""

from __future__ import annotations

from typing import Any

from milepost.core import events as ev
from milepost.verify import checks, schedule
from milepost.verify.effects import Effect

XID = 100
CMD = 200


def event(n: int, etype: str, payload: dict[str, Any] | None = None, **meta: Any) -> ev.Event:
    return ev.new_event(
        1000 + n, XID, etype, float(n), step="charge", payload=payload or {}, meta=meta
    )


def claim(n: int, epoch: int) -> ev.Event:
    return event(n, ev.COMMAND_CLAIMED, {"command_id": CMD, "epoch": epoch, "worker_id": "w"})


def report(n: int, epoch: int, **meta: Any) -> ev.Event:
    return event(n, ev.COMMAND_COMPLETED, {"command_id": CMD}, epoch=epoch, **meta)


def evidence(log: list[ev.Event], **kw: Any) -> checks.Evidence:
    base = [ev.new_event(999, XID, ev.EXECUTION_STARTED, 0.0, payload={"path": checks.ORDER_PATH})]
    return checks.Evidence(
        {XID: base + log},
        kw.pop("expected", {}),
        kw.pop("effects", []),
        kw.pop("reported", set()),
        **kw,
    )


def test_the_same_seed_draws_the_same_schedule_with_a_zombie_and_a_long_pause() -> None:
    one = schedule.draw(7, runs=10, duration=20, workers=2, lease=3)
    assert one == schedule.draw(7, runs=10, duration=20, workers=2, lease=3)
    assert one != schedule.draw(8, runs=10, duration=20, workers=2, lease=3)
    assert any(f.what == schedule.ZOMBIE for f in one.faults)
    assert any(f.what == schedule.PAUSE and f.hold > 3 for f in one.faults)
    assert [f.at for f in one.faults] == sorted(f.at for f in one.faults)


def test_a_report_of_the_live_claim_passes_the_fence_check() -> None:
    log = [
        claim(1, 1),
        event(2, ev.COMMAND_RELEASED, {"command_id": CMD, "epoch": 1}),
        claim(3, 2),
        report(4, 1, stale=True),
        report(5, 2),
    ]
    assert checks.fenced(evidence(log)) == []


def test_a_report_taken_after_its_claim_was_released_or_moved_is_a_violation() -> None:
    released = [
        claim(1, 1),
        event(2, ev.COMMAND_RELEASED, {"command_id": CMD, "epoch": 1}),
        report(3, 1),
    ]
    moved = [claim(1, 1), claim(2, 2), report(3, 1)]
    assert "no live claim" in checks.fenced(evidence(released))[0]
    assert "live epoch 2" in checks.fenced(evidence(moved))[0]


def test_a_run_with_two_terminal_events_or_none_is_a_violation() -> None:
    done = event(5, ev.EXECUTION_COMPLETED)
    assert checks.one_terminal_event(evidence([done, event(6, ev.EXECUTION_FAILED)]))
    assert checks.terminal(evidence([claim(1, 1)]))
    assert not checks.terminal(evidence([done])) and not checks.one_terminal_event(evidence([done]))


def test_an_idempotency_key_twice_and_an_unacknowledged_loss_are_violations() -> None:
    twice = [Effect("k1", "op", XID, "charge"), Effect("k1", "op", XID, "charge")]
    assert checks.effects_once(evidence([], effects=twice))
    assert checks.reported_in_log(evidence([claim(1, 1)], reported={1001, 4242})) == [
        "event 4242, acknowledged to a worker, is not in the log"
    ]


def test_a_failed_order_refunds_once_and_a_completed_one_never() -> None:
    compensated = [
        event(1, ev.COMPENSATION_STARTED),
        event(2, ev.COMPENSATION_COMPLETED),
        event(3, ev.EXECUTION_FAILED),
    ]
    refund = [Effect("k1", "op", XID, "refund")]
    assert (
        checks.compensated_once(evidence(compensated, expected={XID: "FAILED"}, effects=refund))
        == []
    )
    assert checks.compensated_once(evidence(compensated, expected={XID: "FAILED"}))
    assert checks.compensated_once(
        evidence([event(3, ev.EXECUTION_COMPLETED)], expected={XID: "COMPLETED"}, effects=refund)
    )
