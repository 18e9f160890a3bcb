"""An operator's actions through the server (issue 12): retry and skip a step, restart and
re-run a run, each an event naming the token's user; who may act, and the refusals'
bodies (404, 409, 422), with nothing written when refused."""

from __future__ import annotations

import time

import pytest

from milepost.api import auth
from milepost.core import events as ev
from tests.api.support import HELLO, Api, error, ok, playbook

FLAKY = playbook(
    "tests/flaky",
    """
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
    next: flaky
  - step: flaky
    spec: {retry: {max_attempts: 3, backoff: fixed, delay: 600, retry_on: [error]}}
    tool: {kind: python, code: "result = 2"}
    next: [{step: end, args: {got: "{{ flaky }}"}}]
  - step: end
    tool: {kind: python, code: "result = 3"}
""",
)
EACH = playbook(
    "tests/each",
    """
workflow:
  - step: each
    loop: {in: "{{ [1, 2] }}", iterator: n}
    tool: {kind: python, code: "result = n"}
""",
)
ACTION_TYPES = (ev.STEP_RETRY_REQUESTED, ev.STEP_SKIP_REQUESTED, ev.STEP_REUSED)
FATAL = {"kind": "fatal", "message": "no"}


def events_of(api: Api, xid: str, etype: str) -> list[ev.Event]:
    return [e for e in api.store.load(int(xid)) if e.event_type == etype]


def waiting_for_retry(api: Api) -> str:
    """A run whose `flaky` failed once and waits 600 s for its next attempt."""
    xid = api.execute(FLAKY)
    api.complete(api.claim_one(), 1)
    api.complete(api.claim_one(), ok_=False)
    assert events_of(api, xid, ev.COMMAND_RETRY_SCHEDULED)
    assert api.claim_next() == []  # not due for ten minutes
    return xid


def user_token(api: Api, role: str = "operator", user: str = "bob") -> dict[str, str]:
    token = auth.create_token(api.store, role, None, time.time(), user=user)
    return {"Authorization": f"Bearer {token}"}


def test_retry_runs_the_waiting_attempt_now_as_the_token_s_user(api: Api) -> None:
    xid = waiting_for_retry(api)
    reply = ok(
        api.client.post(
            f"/api/executions/{xid}/steps/flaky/retry",
            json={"reason": "the API is back"},
            headers=user_token(api),
        )
    )
    assert (reply["action"], reply["actor"], reply["step_status"]) == (
        "retry",
        "user:bob",
        "RUNNING",
    )
    [request] = events_of(api, xid, ev.STEP_RETRY_REQUESTED)
    assert request.payload["actor"] == "user:bob" and request.payload["reason"] == "the API is back"
    assert str(request.event_id) == reply["event_id"]
    command = api.claim_one()  # due now
    assert command["attempt"] == 2 and reply["issued"][0]["command_id"] == command["command_id"]
    first = events_of(api, xid, ev.COMMAND_ISSUED)[1]
    assert command["idempotency_key"] != first.payload["idempotency_key"]
    api.complete(command, 2)
    api.complete(api.claim_one(), 3)
    assert api.status(xid)["status"] == "COMPLETED"


def test_retry_of_a_live_attempt_stops_it_and_its_heartbeat_is_refused(api: Api) -> None:
    xid = api.execute(FLAKY)
    api.complete(api.claim_one(), 1)
    stuck = api.claim_one()
    reply = ok(api.post(f"/api/executions/{xid}/steps/flaky/retry", role="operator"))
    assert reply["stopped"] == [stuck["command_id"]] and reply["actor"] == "token:test-operator"
    beat = api.post(
        f"/api/commands/{stuck['command_id']}/heartbeat",
        {"worker_id": "w1", "epoch": stuck["lease"]["epoch"]},
        role="worker",
    )
    error(beat, 409, "stale_epoch")  # the worker stops the attempt
    api.complete(stuck, 9)  # a late report: stale, the new attempt decides
    assert api.claim_one()["attempt"] == 2


def test_skip_completes_the_step_with_the_result_and_the_run_goes_on(api: Api) -> None:
    xid = waiting_for_retry(api)
    reply = ok(
        api.post(
            f"/api/executions/{xid}/steps/flaky/skip",
            {"result": {"v": 42}, "reason": "done by hand"},
            role="operator",
        )
    )
    assert (reply["action"], reply["step_status"]) == ("skip", "COMPLETED")
    [request] = events_of(api, xid, ev.STEP_SKIP_REQUESTED)
    assert (
        request.payload["result"] == {"v": 42} and request.payload["actor"] == "token:test-operator"
    )
    end = api.claim_one()
    assert end["step"] == "end" and end["args"] == {"got": {"v": 42}}
    api.complete(end, 3)
    status = api.status(xid)
    assert status["status"] == "COMPLETED" and status["steps"]["flaky"]["result"] == {"v": 42}


def test_restart_reuses_earlier_results_and_links_both_ways_and_rerun(api: Api) -> None:
    xid = api.execute(FLAKY, workload={"n": 4})
    api.complete(api.claim_one(), 1)
    api.complete(api.claim_one(), ok_=False, error=FATAL)
    assert api.status(xid)["status"] == "FAILED"
    reply = ok(api.post(f"/api/executions/{xid}/restart", {}, role="operator"))
    new = reply["execution_id"]
    assert reply == {
        "execution_id": new,
        "restarted_from": xid,
        "rerun_of": None,
        "from_step": "flaky",
        "reused": ["start"],
    }
    command = api.claim_one()
    assert command["step"] == "flaky" and command["execution_id"] == new  # start not run again
    assert ok(api.get(f"/api/executions/{xid}/restarts")) == {
        "execution_id": xid,
        "restarted_from": None,
        "restarts": [new],
    }
    assert ok(api.get(f"/api/executions/{new}/restarts"))["restarted_from"] == xid
    [started] = events_of(api, new, ev.EXECUTION_STARTED)
    assert started.payload["workload"] == {"n": 4}
    assert started.payload["restart"]["actor"] == "token:test-operator"
    assert api.status(xid)["status"] == "FAILED"  # never moved
    rerun = ok(api.post(f"/api/executions/{xid}/rerun", role="operator"))
    assert rerun["rerun_of"] == xid and rerun["restarted_from"] is None
    assert events_of(api, rerun["execution_id"], ev.EXECUTION_STARTED)[0].payload["workload"] == {
        "n": 4
    }


@pytest.mark.parametrize("role", ["approver", "viewer", "worker"])
def test_only_admin_and_operator_tokens_may_act(api: Api, role: str) -> None:
    xid = waiting_for_retry(api)
    before = len(api.store.load(int(xid)))
    for path, body in (
        ("steps/flaky/retry", None),
        ("steps/flaky/skip", {"result": 1}),
        ("restart", None),
        ("rerun", None),
    ):
        refused = error(
            api.post(f"/api/executions/{xid}/{path}", body, role=role), 403, "forbidden"
        )
        assert refused["role"] == role
    error(api.post(f"/api/executions/{xid}/rerun", role=None), 401, "unauthorized")
    assert len(api.store.load(int(xid))) == before


def test_refusals_name_what_is_wrong_and_write_nothing(api: Api) -> None:
    xid = waiting_for_retry(api)
    before = len(api.store.load(int(xid)))
    base = f"/api/executions/{xid}"
    missing = error(api.post("/api/executions/123/steps/flaky/retry"), 404, "execution_not_found")
    assert missing["execution_id"] == "123"
    assert error(api.post(f"{base}/steps/nope/retry"), 404, "step_not_found")["step"] == "nope"
    nothing = error(api.post(f"{base}/steps/end/retry"), 409, "nothing_to_retry")
    assert nothing["status"] == "not started"
    error(api.post(f"{base}/steps/end/skip", {"result": 1}), 409, "step_not_active")
    error(api.post(f"{base}/restart"), 409, "not_restartable")
    error(api.post(f"{base}/steps/flaky/skip", {}), 422, "validation_error")  # no result
    error(api.post(f"{base}/steps/flaky/retry", {"extra": 1}), 422, "validation_error")
    assert len(api.store.load(int(xid))) == before
    loop = api.execute(EACH)
    refused = error(
        api.post(f"/api/executions/{loop}/steps/each/skip", {"result": 5}), 422, "invalid_result"
    )
    assert "JSON array" in refused["message"]


def test_an_ended_run_is_never_moved_and_the_refusal_names_restart(api: Api) -> None:
    xid = api.execute(FLAKY)
    api.complete(api.claim_one(), 1)
    api.complete(api.claim_one(), ok_=False, error=FATAL)
    for action, body in (("retry", None), ("skip", {"result": 1})):
        refused = error(
            api.post(f"/api/executions/{xid}/steps/flaky/{action}", body), 409, "execution_terminal"
        )
        assert refused["use"] == "restart" and "milepost restart" in refused["message"]
    assert api.event_types(xid)[-1] == ev.EXECUTION_FAILED


@pytest.mark.parametrize("etype", ACTION_TYPES)
def test_an_action_event_posted_by_a_client_is_refused(api: Api, etype: str) -> None:
    xid = api.execute(HELLO)
    before = api.store.load(int(xid))
    event = {
        "execution_id": xid,
        "event_type": etype,
        "step": "start",
        "context": {"actor": "user:mallory", "run": 1, "result": 1, "indexes": [-1]},
    }
    refused = error(api.post("/api/events", event, role="admin"), 422, "validation_error")
    assert "written by the engine" in refused["message"]
    assert api.store.load(int(xid)) == before
