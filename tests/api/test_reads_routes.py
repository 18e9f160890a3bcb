"""The operator's reads on the wire: `GET /api/executions?since=` with end and duration,
`/describe` (attempts, workers, redacted input, a failure's output) and `/events` by step
and type, paged and tailed."""

from __future__ import annotations

from tests.api.support import HELLO, Api, error, ok
from tests.api.test_executions import SECRET_READER


def test_a_sealed_run_is_described_with_its_workers_and_masked_input(api: Api) -> None:
    xid = api.execute(SECRET_READER, workload={"db": {"password": "hunter2-real"}})
    api.complete(api.claim_one("w-7"), ok_=False, error={"kind": "error", "message": "boom"})
    body = ok(api.get(f"/api/executions/{xid}/describe", role="viewer"))
    step = body["steps"]["start"]
    assert body["status"] == "FAILED" and step["status"] == "FAILED"
    assert step["input"] == {"pw": "***"} and "hunter2-real" not in str(body)
    [attempt] = step["attempts"]
    assert (attempt["worker"], attempt["status"], attempt["error"]["message"]) == (
        "w-7",
        "FAILED",
        "boom",
    )
    assert attempt["started_at"].endswith("+00:00") and "." in attempt["started_at"]  # ms
    assert body["duration_s"] is not None and body["started_by"]
    error(api.get("/api/executions/424242/describe"), 404, "execution_not_found")


def test_events_are_chosen_by_step_and_type_paged_and_tailed(api: Api) -> None:
    xid = api.execute(HELLO)
    api.complete(api.claim_one(), {"greeting": "hi"})
    url = f"/api/executions/{xid}/events"
    everything = ok(api.get(url))
    assert everything["next"] is None and everything["status"] == "RUNNING"
    seqs = [e["seq"] for e in everything["events"]]
    assert everything["last_seq"] == seqs[-1]
    start = ok(api.get(url, params={"step": "start", "type": "command"}))
    assert [e["event_type"] for e in start["events"]] == [
        "command.issued",
        "command.claimed",
        "command.completed",
    ]
    page = ok(api.get(url, params={"limit": 2}))
    assert [e["seq"] for e in page["events"]] == seqs[:2] and page["next"] == seqs[1]
    rest = ok(api.get(url, params={"after": page["next"]}))
    assert [e["seq"] for e in rest["events"]] == seqs[2:]
    assert [e["seq"] for e in ok(api.get(url, params={"tail": 1}))["events"]] == seqs[-1:]
    assert ok(api.get(url, params={"after": seqs[-1]}))["last_seq"] == seqs[-1]
    error(api.get("/api/executions/424242/events"), 404, "execution_not_found")
    # a step the playbook does not have is named, not answered with an empty log
    body = error(api.get(url, params={"step": "strat"}), 404, "step_not_found")
    assert "'strat'" in body["message"] and "start" in body["message"]


def test_the_list_has_end_and_duration_and_filters_since(api: Api) -> None:
    xid = api.execute(HELLO)
    [item] = ok(api.get("/api/executions", params={"since": "2000-01-01T00:00"}))["items"]
    assert item["execution_id"] == xid and item["ended_at"] is None and item["duration_s"] is None
    assert ok(api.get("/api/executions", params={"since": "2199-01-01"}))["items"] == []
    body = error(api.get("/api/executions", params={"since": "soon"}), 422, "validation_error")
    assert body["errors"][0]["loc"] == ["query", "since"]
