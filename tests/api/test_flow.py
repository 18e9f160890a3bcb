"""End to end through the API alone: register, execute, claim each command, report, done."""

from __future__ import annotations

from typing import Any

import pytest

from milepost.core import decide as decide_module
from tests.api.support import HELLO, LOOP, Api, ok, report_wire


def run_step(command: dict[str, Any]) -> Any:
    """What the two test playbooks compute, from the context the server handed out."""
    ctx = command["context"]
    if command["step"] == "start":
        return {"greeting": "Hello, " + ctx["workload"]["name"]}
    if command["step"] == "shout":
        return {"loud": ctx["start"]["greeting"].upper()}
    if command["step"] == "each":
        return ctx["n"] * 10
    if command["step"] == "total":
        return sum(ctx["each"])
    raise AssertionError(command["step"])


def drive(api: Api, xid: str, *, limit: int = 1) -> int:
    """Claim and report until the run ends; returns how many commands ran."""
    ran = 0
    for _ in range(50):
        if api.status(xid)["status"] != "RUNNING":
            return ran
        commands = api.claim_next("w1", limit=limit)
        assert commands, api.status(xid)
        events = []
        for command in commands:
            events += report_wire(command, run_step(command))
        reply = ok(api.post("/api/events/batch", {"events": events}, role="worker"))
        assert reply["stored"] == len(events) and reply["stale"] == []
        ran += len(commands)
    raise AssertionError("the run did not end")


def test_hello_world_runs_to_completed_through_the_api(api: Api) -> None:
    entry = api.register(HELLO)
    xid = ok(
        api.post(
            "/api/execute", {"path": entry["path"], "workload": {"name": "Ada"}}, role="operator"
        )
    )["execution_id"]
    assert drive(api, xid) == 2
    status = ok(api.get(f"/api/executions/{xid}/status", role="viewer"))
    assert status["status"] == "COMPLETED" and status["error"] is None
    assert status["steps"]["shout"]["result"] == {"loud": "HELLO, ADA"}
    whole = ok(api.get(f"/api/executions/{xid}", role="viewer"))
    types = [e["event_type"] for e in whole["events"]]
    assert types.count("command.completed") == 2 and types[-1] == "execution.completed"
    assert [e["seq"] for e in whole["events"]] == list(range(1, len(types) + 1))
    listed = ok(api.get("/api/executions", params={"status": "COMPLETED"}))["items"]
    assert [i["execution_id"] for i in listed] == [xid]
    assert api.store.open_commands(int(xid)) == []


def test_a_parallel_loop_runs_through_the_api_and_totals_its_results(api: Api) -> None:
    xid = api.execute(LOOP, workload={"items": [1, 2, 3, 4]})
    assert drive(api, xid, limit=10) == 5
    status = api.status(xid)
    assert status["status"] == "COMPLETED"
    assert status["steps"]["each"]["result"] == [10, 20, 30, 40]
    assert status["steps"]["total"]["result"] == 100


def test_a_failed_command_fails_the_run_with_its_error(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    api.complete(command, ok_=False, error={"kind": "error", "message": "kaboom"})
    status = api.status(xid)
    assert status["status"] == "FAILED" and "kaboom" in status["error"]["message"]
    assert api.store.get_execution(int(xid)).status == "FAILED"


def test_an_engine_error_ends_the_run_failed_and_keeps_the_report(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()

    def broken(*args: Any, **kw: Any) -> Any:
        raise ZeroDivisionError("a bug in decide")

    monkeypatch.setattr(decide_module, "decide", broken)
    reply = api.complete(command, {"greeting": "hi"})  # the worker's call succeeds
    assert reply["stored"] == 1
    status = api.status(xid)
    assert status["status"] == "FAILED"
    assert status["error"]["kind"] == "engine" and status["error"]["code"] == "engine_error"
    assert status["error"]["message"] == "ZeroDivisionError: a bug in decide"
    assert api.event_types(xid)[-2:] == ["command.completed", "execution.failed"]
    assert api.store.get_execution(int(xid)).status == "FAILED"
    assert api.store.open_commands(int(xid)) == []
    metrics = api.get("/metrics", role="viewer").text
    assert "milepost_engine_errors_total 1.0" in metrics.splitlines()
