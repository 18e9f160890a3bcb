"""`GET /api/executions/{id}/results/{result_id}`: a result too large for the log's row is
described by reference and read on demand; the route needs a token, answers 404 for an
entry the run does not have (another run's included) and never serves a sealed workload."""

from __future__ import annotations

from typing import Any

from milepost.store.port import BLOB_PREFIX, BLOB_THRESHOLD
from tests.api.support import HELLO, Api, error, ok, playbook
from tests.api.test_executions import SECRET_READER

BIG = {"rows": ["x" * 100] * (BLOB_THRESHOLD // 100 + 10)}


def _reference(api: Api, xid: str) -> dict[str, Any]:
    step = ok(api.get(f"/api/executions/{xid}/describe", role="viewer"))["steps"]["start"]
    assert step["status"] == "COMPLETED"
    ref: dict[str, Any] = step["result"]["reference"]
    return ref


def test_a_large_result_is_described_by_reference_and_read_on_demand(api: Api) -> None:
    xid = api.execute(HELLO)
    api.complete(api.claim_one(), BIG)
    ref = _reference(api, xid)
    assert ref["uri"].startswith(f"{BLOB_PREFIX}{xid}/") and ref["size"] > BLOB_THRESHOLD
    result_id = ref["uri"].rsplit("/", 1)[1]
    entry = ok(api.get(f"/api/executions/{xid}/results/{result_id}", role="viewer"))
    assert entry["result"] == BIG
    api.complete(api.claim_one(), {"loud": "HI"})  # a small result stays inline
    steps = ok(api.get(f"/api/executions/{xid}/describe"))["steps"]
    assert steps["shout"]["result"] == {"loud": "HI"}


def test_the_route_needs_a_token_and_refuses_what_the_run_has_not(api: Api) -> None:
    xid = api.execute(HELLO)
    api.complete(api.claim_one(), BIG)
    result_id = _reference(api, xid)["uri"].rsplit("/", 1)[1]
    url = f"/api/executions/{xid}/results/{result_id}"
    assert api.get(url, role=None).status_code == 401
    other = api.execute(HELLO)  # another run: its id does not open this run's entry
    body = error(api.get(f"/api/executions/{other}/results/{result_id}"), 404, "result_not_found")
    assert body["result_id"] == result_id and body["execution_id"] == other
    error(api.get(f"/api/executions/{xid}/results/12345"), 404, "result_not_found")
    error(api.get(f"/api/executions/424242/results/{result_id}"), 404, "execution_not_found")
    body = error(api.get(f"/api/executions/{xid}/results/abc"), 422, "validation_error")
    assert "result_id" in str(body)


def test_a_sealed_workload_is_never_served_as_a_result(api: Api) -> None:
    xid = api.execute(SECRET_READER, workload={"db": {"password": "hunter2-real"}})
    started = api.store.load(int(xid))[0].payload
    sealed = started["sealed_workload"]
    assert sealed.startswith(f"{BLOB_PREFIX}{xid}/")  # the entry is this run's own
    response = api.get(f"/api/executions/{xid}/results/{sealed.rsplit('/', 1)[1]}")
    assert response.status_code == 404 and "hunter2-real" not in response.text


PARENT = playbook(
    "tests/parent",
    """
workflow:
  - step: child
    tool: {kind: playbook, path: tests/hello}
    next: look_alike
  - step: look_alike
    tool: {kind: python, code: "result = {'execution_id': '7', 'status': 'COMPLETED'}"}
""",
)


def test_attempts_name_their_idempotency_key_and_a_playbook_steps_child(api: Api) -> None:
    api.register(HELLO)
    xid = api.execute(PARENT)
    command = api.claim_one()
    api.complete(command, {"execution_id": "9876", "status": "COMPLETED"})
    api.complete(api.claim_one(), {"execution_id": "7", "status": "COMPLETED"})
    steps = ok(api.get(f"/api/executions/{xid}/describe", role="viewer"))["steps"]
    [attempt] = steps["child"]["attempts"]
    assert attempt["idempotency_key"] == command["idempotency_key"]
    assert attempt["child_execution_id"] == "9876"
    # the same shape from a step that starts no child links nothing
    assert steps["look_alike"]["attempts"][0]["child_execution_id"] is None
