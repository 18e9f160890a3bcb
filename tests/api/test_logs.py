"""`GET /api/executions/{id}/logs` and the `logs` a report event carries: stored beside
the log (never in an event), masked like a report's result, once per report however often
it is posted, read in order from a cursor; bad entries and unknown runs refused."""

from __future__ import annotations

import json

from tests.api.support import HELLO, Api, error, ok, report_wire


def test_a_reports_logs_are_kept_once_and_read_from_a_cursor(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    [report] = report_wire(command, {"greeting": "hi"})
    report["logs"] = [
        {"stream": "stdout", "text": "token=abcdefghijk printed\n"},
        {"stream": "stderr", "text": "warn\n", "cut": 7},
    ]
    ok(api.post("/api/events/batch", {"events": [report]}, role="worker"))
    ok(api.post("/api/events/batch", {"events": [report]}, role="worker"))  # a resend
    body = ok(api.get(f"/api/executions/{xid}/logs", role="viewer"))
    assert body["execution_id"] == xid and body["status"] == "RUNNING"
    entries = body["entries"]
    assert [(e["step"], e["stream"], e["text"], e["cut"]) for e in entries] == [
        ("start", "stdout", "token=*** printed\n", 0),
        ("start", "stderr", "warn\n", 7),
    ]
    assert entries[0]["command_id"] == str(command["command_id"]) and entries[0]["attempt"] == 1
    assert body["next"] == entries[-1]["cursor"]
    later = ok(api.get(f"/api/executions/{xid}/logs", params={"after": entries[0]["cursor"]}))
    assert later["entries"] == entries[1:]
    assert ok(api.get(f"/api/executions/{xid}/logs", params={"after": body["next"]})) == {
        **body,
        "entries": [],
    }
    assert ok(api.get(f"/api/executions/{xid}/logs", params={"step": "shout"}))["entries"] == []
    assert "printed" not in json.dumps([e.payload for e in api.store.load(int(xid))])


def test_bad_log_entries_and_unknown_runs_are_refused(api: Api) -> None:
    xid = api.execute(HELLO)
    [report] = report_wire(api.claim_one(), {"greeting": "hi"})
    report["logs"] = [{"stream": "stdlog", "text": "x"}]
    problem = error(
        api.post("/api/events/batch", {"events": [report]}, role="worker"), 422, "validation_error"
    )
    assert "stream" in json.dumps(problem)
    assert ok(api.get(f"/api/executions/{xid}/logs"))["entries"] == []
    error(api.get("/api/executions/42/logs"), 404, "execution_not_found")
    error(api.get(f"/api/executions/{xid}/logs", params={"after": -1}), 422, "validation_error")
