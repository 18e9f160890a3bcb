"""The Prometheus exposition carries the server's counters."""

from __future__ import annotations

from milepost.core import events as ev
from tests.api.support import HELLO, Api, error, ok, report_wire
from tests.shared import metric_sample


def test_metrics_count_events_commands_claims_and_evaluations(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    [report] = report_wire(command, {"greeting": "hi"})
    ok(api.post("/api/events/batch", {"events": [report]}, role="worker"))
    ok(api.post("/api/events/batch", {"events": [report]}, role="worker"))  # a duplicate
    [stale] = report_wire(command, {"greeting": "late"})
    ok(api.post("/api/events", stale, role="worker"))
    # a type the engine does not know is stored as informative (DSL 12.3), counted `unknown`
    ok(api.post("/api/events", {"execution_id": xid, "event_type": "nope"}, role="worker"))
    error(
        api.post(
            "/api/events", {"execution_id": xid, "event_type": "nope2", "step": "x"}, role="worker"
        ),
        422,
        "validation_error",
    )
    error(
        api.post(
            f"/api/commands/{command['command_id']}/claim", {"worker_id": "w9"}, role="worker"
        ),
        409,
        "already_terminal",
    )
    response = api.get("/metrics", role="viewer")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    done = "command.completed"
    assert (
        metric_sample(text, "milepost_events_ingested_total", event_type=done, outcome="stored")
        == 1
    )
    assert (
        metric_sample(text, "milepost_events_ingested_total", event_type=done, outcome="duplicate")
        == 1
    )
    assert (
        metric_sample(text, "milepost_events_ingested_total", event_type=done, outcome="stale") == 1
    )
    assert (
        metric_sample(
            text, "milepost_events_ingested_total", event_type="unknown", outcome="rejected"
        )
        == 1
    )
    assert (
        metric_sample(
            text, "milepost_events_ingested_total", event_type="unknown", outcome="stored"
        )
        == 1
    )
    assert "nope" not in text
    assert metric_sample(text, "milepost_commands_issued_total") == 2
    assert metric_sample(text, "milepost_commands_claimed_total") == 1
    assert metric_sample(text, "milepost_commands_completed_total", outcome="completed") == 1
    assert metric_sample(text, "milepost_claim_conflicts_total", code="already_terminal") == 1
    assert metric_sample(text, "milepost_command_queue_depth") == 1  # `shout` waits for a worker
    assert metric_sample(text, "milepost_event_ingest_seconds_count") == 5
    assert metric_sample(text, "milepost_orchestrator_evaluation_seconds_count") >= 3


def test_pending_approvals_by_risk_are_read_from_the_store_at_each_scrape(api: Api) -> None:
    xid = int(api.execute(HELLO))

    def gauge() -> dict[str, float]:
        text = ok_text(api)
        return {
            risk: metric_sample(text, "milepost_approvals_pending", risk=risk)
            for risk in ("low", "medium", "high")
        }

    assert gauge() == {"low": 0, "medium": 0, "high": 0}
    asked = [
        ev.new_event(
            900_000 + i,
            xid,
            ev.APPROVAL_REQUESTED,
            1.0 + i,
            step="start",
            payload={
                "approval_id": 900_000 + i,
                "run": 1,
                "risk": risk,
                "approvers": ["role:finance"],
                "quorum": 1,
                "digest": "d",
            },
        )
        for i, risk in enumerate(("high", "high", "low"))
    ]
    api.store.append(asked)
    assert gauge() == {"low": 1, "medium": 0, "high": 2}
    api.store.append(
        [
            ev.new_event(
                900_010,
                xid,
                ev.APPROVAL_DENIED,
                9.0,
                step="start",
                payload={"approval_id": 900_000, "by": "user:b"},
            )
        ]
    )
    assert gauge() == {"low": 1, "medium": 0, "high": 1}


def ok_text(api: Api) -> str:
    response = api.get("/metrics", role="viewer")
    assert response.status_code == 200
    return response.text
