"""Liveness metrics: runs failed as stalled, attempts failed by timeout or lost, counted
from the events one engine call committed (a stale report counts for nothing)."""

from __future__ import annotations

from milepost.api.metrics import EngineMeters, Metrics
from milepost.core import events as ev
from milepost.engine.liveness_meter import LivenessMeter
from milepost.engine.orchestrator import Outcome
from tests.shared import metric_sample

T0 = 1_764_600_000.0


def event(event_id: int, event_type: str, kind: str | None = None, stale: bool = False) -> ev.Event:
    payload = {} if kind is None else {"error": {"kind": kind, "message": "x"}}
    return ev.new_event(
        event_id,
        42,
        event_type,
        T0,
        step="s",
        payload=payload,
        meta={"stale": True} if stale else {},
    )


def test_stalled_runs_and_timed_out_or_lost_attempts_are_counted() -> None:
    metrics = Metrics()
    meter = LivenessMeter(EngineMeters(metrics))
    text = metrics.exposition().decode()
    assert metric_sample(text, "milepost_attempts_failed_total", kind="lost") == 0.0
    meter(
        Outcome(
            events=[
                event(1, ev.COMMAND_FAILED, "timeout"),
                event(2, ev.COMMAND_FAILED, "timeout", stale=True),
                event(3, ev.COMMAND_FAILED, "http"),
                event(4, ev.COMMAND_LEASE_EXPIRED),
                event(5, ev.EXECUTION_FAILED, "stalled"),
                event(6, ev.EXECUTION_FAILED, "timeout"),
            ]
        )
    )
    text = metrics.exposition().decode()
    assert metric_sample(text, "milepost_attempts_failed_total", kind="timeout") == 1.0
    assert metric_sample(text, "milepost_attempts_failed_total", kind="lost") == 1.0
    assert metric_sample(text, "milepost_runs_stalled_total") == 1.0
