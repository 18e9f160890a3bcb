"""`GET /api/executions/{id}/diagnosis`: why a run is not moving, or why it ended, on
SQLite and PostgreSQL (the verdict itself: tests/unit/test_diagnosis.py)."""

from __future__ import annotations

from typing import Any

from tests.api.support import GPU, HELLO, LOOP, RETRY, Api, error, ok, playbook

GATED = playbook(
    "tests/gated",
    """
workflow:
  - step: refund
    tool: {kind: noop}
    spec:
      approval: {approvers: [role:finance, user:alice], quorum: 1, expires_in: 1h}
""",
)


def diagnosis(api: Api, xid: str, role: str = "viewer") -> dict[str, Any]:
    return ok(api.get(f"/api/executions/{xid}/diagnosis", role=role))


def kinds(found: dict[str, Any]) -> list[str]:
    return [f["kind"] for f in found["findings"]]


def test_a_claimed_command_names_its_worker_and_lease_end_then_the_run_completes(api: Api) -> None:
    ok(api.post("/api/workers/machine-id", {"worker_id": "w1"}, role="worker"))
    xid = api.execute(HELLO)
    assert kinds(diagnosis(api, xid)) == ["queued"]  # a live default worker will take it
    command = api.claim_one("w1")
    found = diagnosis(api, xid)
    assert (found["execution_id"], found["status"], found["playbook"]) == (
        xid,
        "RUNNING",
        "tests/hello",
    )
    (claimed,) = found["findings"]
    assert claimed["kind"] == "claimed" and claimed["step"] == "start"
    assert claimed["fields"]["worker_id"] == "w1"
    assert claimed["fields"]["lease_expires_at"] == command["lease"]["expires_at"]
    assert claimed["message"].startswith(
        "step 'start' attempt 1 is claimed by w1; its lease ends in "
    )
    api.complete(command, {"greeting": "hi"})
    api.complete(api.claim_one("w1"), {"loud": "HI"})
    (done,) = diagnosis(api, xid)["findings"]
    assert done["kind"] == "completed" and done["message"].startswith("the run completed after ")


def test_a_pool_without_a_live_worker_is_named(api: Api) -> None:
    xid = api.execute(GPU)
    ok(api.post("/api/workers/machine-id", {"worker_id": "w1"}, role="worker"))  # default only
    (found,) = diagnosis(api, xid)["findings"]
    assert found == {
        "kind": "no_live_worker",
        "step": "train",
        "fields": {"pool": "gpu", "commands": 1, "steps": ["train"]},
        "message": "1 command(s) of step train wait in pool gpu, which no live "
        "worker serves: start `milepost worker --pool gpu`",
    }


def test_an_approval_names_who_may_decide(api: Api) -> None:
    xid = api.execute(GATED)
    (found,) = diagnosis(api, xid)["findings"]
    assert found["kind"] == "awaiting_approval" and found["step"] == "refund"
    assert found["fields"]["approvers"] == ["role:finance", "user:alice"]
    assert "who may decide: role:finance, user:alice" in found["message"]
    assert "(not token:test-admin, who started the run); it expires in " in found["message"]
    assert found["fields"]["expires_at"].endswith("+00:00")


def test_a_retry_timer_and_a_loop_are_named(api: Api) -> None:
    ok(api.post("/api/workers/machine-id", {"worker_id": "w1"}, role="worker"))
    xid = api.execute(RETRY)
    api.complete(api.claim_one("w1"), ok_=False, error={"kind": "error", "message": "flaky"})
    (retry,) = diagnosis(api, xid)["findings"]
    assert retry["kind"] == "retry_pending" and retry["fields"]["attempt"] == 2
    assert retry["message"].endswith("attempt 2 of 3, after: flaky")
    assert retry["fields"]["not_before_at"].endswith("+00:00")
    looped = api.execute(LOOP)
    api.complete(api.claim_next("w1", limit=1)[0], 10)
    found = diagnosis(api, looped)
    assert kinds(found)[0] == "loop_waiting"
    assert found["findings"][0]["fields"] | {"in_flight": None} == {
        "total": 3,
        "done": 1,
        "in_flight": None,
        "retrying": 0,
        "not_started": 0,
        "max_in_flight": 3,
        "failed_ok": 0,
    }


def test_a_failed_run_names_its_first_error_with_the_line_of_code(api: Api) -> None:
    xid = api.execute(HELLO)
    api.complete(
        api.claim_one("w1"),
        ok_=False,
        error={
            "kind": "exception",
            "message": "KeyError: 'name'",
            "code": "KeyError",
            "line": 2,
            "code_line": "result = input_data['name']",
        },
    )
    (found,) = diagnosis(api, xid)["findings"]
    assert found["kind"] == "failed" and found["step"] == "start"
    assert found["message"] == (
        "step 'start' (python) failed: KeyError: 'name' at line 2: result = input_data['name']"
    )
    assert (found["fields"]["tool"], found["fields"]["line"]) == ("python", 2)


def test_an_unknown_execution_is_404_a_bad_id_422_and_a_token_is_needed(api: Api) -> None:
    body = error(api.get("/api/executions/12345/diagnosis"), 404, "execution_not_found")
    assert body["execution_id"] == "12345"
    error(api.get("/api/executions/x1/diagnosis"), 422, "validation_error")
    assert api.get("/api/executions/12345/diagnosis", role=None).status_code == 401


def test_a_playbook_step_names_its_running_child(api: Api) -> None:
    api.register(HELLO)
    parent = api.execute(
        playbook(
            "tests/parent",
            """
    workflow:
      - step: sub
        tool: {kind: playbook, path: tests/hello}
    """,
        )
    )
    command = api.claim_one("w1")
    child = ok(
        api.post(
            "/api/execute",
            {
                "path": "tests/hello",
                "parent_execution_id": parent,
                "parent_command_id": command["command_id"],
                "parent_epoch": command["lease"]["epoch"],
            },
            role="worker",
        )
    )["execution_id"]
    found = diagnosis(api, parent)
    assert kinds(found) == ["child_running", "claimed"]
    assert found["findings"][0]["step"] == "sub"
    assert found["findings"][0]["fields"] == {"child_execution_id": child, "path": "tests/hello"}
    assert kinds(diagnosis(api, child)) == ["no_live_worker"]  # nobody serves the child's pool
