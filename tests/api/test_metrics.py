"""The Prometheus exposition carries the server's counters."""

from __future__ import annotations

import re

from tests.api.support import HELLO, Api, error, ok, report_wire


def sample(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" (\S+)"
    found = re.search("^" + pattern + "$", text, re.MULTILINE)
    assert found, f"{name} {labels} not in the exposition"
    return float(found.group(1))


def test_metrics_count_events_commands_claims_and_evaluations(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    [report] = report_wire(command, {"greeting": "hi"})
    ok(api.post("/api/events/batch", {"events": [report]}, role="worker"))
    ok(api.post("/api/events/batch", {"events": [report]}, role="worker"))  # a duplicate
    [stale] = report_wire(command, {"greeting": "late"})
    ok(api.post("/api/events", stale, role="worker"))
    error(api.post("/api/events", {"execution_id": xid, "event_type": "nope"}, role="worker"),
          422, "validation_error")  # fmt: skip
    error(api.post(f"/api/commands/{command['command_id']}/claim", {"worker_id": "w9"},
                   role="worker"), 409, "already_terminal")  # fmt: skip
    response = api.get("/metrics", role="viewer")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    done = "command.completed"
    assert sample(text, "milepost_events_ingested_total", event_type=done, outcome="stored") == 1
    assert sample(text, "milepost_events_ingested_total", event_type=done, outcome="duplicate") == 1
    assert sample(text, "milepost_events_ingested_total", event_type=done, outcome="stale") == 1
    assert sample(text, "milepost_events_ingested_total", event_type="unknown",
                  outcome="rejected") == 1  # fmt: skip
    assert sample(text, "milepost_commands_issued_total") == 2
    assert sample(text, "milepost_commands_claimed_total") == 1
    assert sample(text, "milepost_commands_completed_total", outcome="completed") == 1
    assert sample(text, "milepost_claim_conflicts_total", code="already_terminal") == 1
    assert sample(text, "milepost_command_queue_depth") == 1  # `shout` waits for a worker
    assert sample(text, "milepost_event_ingest_seconds_count") == 4
    assert sample(text, "milepost_orchestrator_evaluation_seconds_count") >= 3
