"""A worker token may start, watch and cancel the children of a command it holds the live
claim of, and nothing else (issue 8, item 8)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from milepost.core import events as ev
from tests.api.support import HELLO, LOOP, Api, FakeClock, error, ok, playbook, start_server

PARENT = playbook(
    "tests/parent",
    """
workload: {items: [1, 2, 3]}
workflow:
  - step: each
    loop: {in: "{{ workload['items'] }}", iterator: n, spec: {mode: parallel, max_in_flight: 3}}
    tool: {kind: playbook, path: tests/hello}
""",
)
"""Three commands whose step starts `tests/hello`."""

ONE_CHILD = playbook(
    "tests/one_child",
    """
workflow:
  - step: child
    tool: {kind: playbook, path: tests/hello}
""",
)

TEMPLATED = playbook(
    "tests/templated",
    """
workload: {child: tests/hello}
workflow:
  - step: child
    tool: {kind: playbook, path: "{{ workload.child }}"}
""",
)


@pytest.fixture
def server(db_url: str, clock: FakeClock) -> Iterator[Api]:
    with start_server(db_url, clock=clock) as api:
        yield api


def claimed_parent(api: Api, parent: str = PARENT) -> dict[str, Any]:
    """A run of `parent` with one of its commands claimed by a worker; HELLO is registered."""
    api.register(HELLO)
    api.execute(parent)
    return api.claim_one("w1", lease_seconds=30)


def proof(command: dict[str, Any], **over: Any) -> dict[str, Any]:
    body = {
        "parent_execution_id": command["execution_id"],
        "parent_command_id": command["command_id"],
        "parent_epoch": command["lease"]["epoch"],
    }
    body.update(over)
    return body


def start_child(api: Api, command: dict[str, Any], role: str = "worker", **over: Any) -> Any:
    return api.post("/api/execute", {"path": "tests/hello", **proof(command, **over)}, role=role)


def query(command: dict[str, Any]) -> dict[str, Any]:
    return {"parent_command_id": command["command_id"], "parent_epoch": command["lease"]["epoch"]}


def refused(response: Any, reason: str) -> dict[str, Any]:
    body = error(response, 403, "forbidden")
    assert body["reason"] == reason and body["role"] == "worker", body
    return body


def executions(api: Api) -> int:
    return len(api.store.list_executions(limit=1000))


def test_a_worker_starts_watches_and_cancels_a_child_of_the_command_it_holds(server: Api) -> None:
    command = claimed_parent(server)
    child = ok(start_child(server, command))["execution_id"]

    row = server.store.get_execution(int(child))
    assert row is not None and row.parent_execution_id == int(command["execution_id"])
    started = server.store.load(int(child))[0]
    assert started.event_type == ev.EXECUTION_STARTED
    assert started.payload["parent_command_id"] == int(command["command_id"])

    status = ok(
        server.get(
            f"/api/executions/{child}/status", role="worker", params={**query(command), "wait": 0}
        )
    )
    assert status["execution_id"] == child and status["status"] == "RUNNING"
    cancelled = ok(
        server.post(f"/api/executions/{child}/cancel", {}, role="worker", params=query(command))
    )
    assert cancelled["execution_id"] == child
    assert ev.EXECUTION_CANCEL_REQUESTED in server.event_types(child)


def test_a_worker_without_a_live_claim_starts_nothing(server: Api, clock: FakeClock) -> None:
    command = claimed_parent(server)
    other = server.execute(HELLO)
    before = executions(server)
    # no proof at all
    body = refused(
        server.post("/api/execute", {"path": "tests/hello"}, role="worker"), "no_claim_proof"
    )
    assert "parent_command_id" in body["message"]
    refused(start_child(server, command, parent_epoch=command["lease"]["epoch"] + 1), "stale_epoch")
    refused(start_child(server, command, parent_command_id="999"), "command_not_found")
    refused(start_child(server, command, parent_execution_id=other), "other_execution")
    clock.now += 31  # past the lease, before the reconciler noticed
    refused(start_child(server, command), "lease_expired")
    assert executions(server) == before  # nothing was started by any refused request


def test_a_released_or_completed_claim_proves_nothing(server: Api) -> None:
    command = claimed_parent(server, ONE_CHILD)  # one command: the claim after the release is it
    ok(
        server.post(
            f"/api/commands/{command['command_id']}/release",
            {"worker_id": "w1", "epoch": command["lease"]["epoch"]},
            role="worker",
        )
    )
    refused(start_child(server, command), "not_claimed")
    again = server.claim_one("w2")
    assert again["command_id"] == command["command_id"]
    server.complete(again, {"execution_id": "1", "status": "COMPLETED"})
    refused(start_child(server, again), "not_claimed")


def test_a_worker_may_not_watch_or_cancel_a_run_its_command_did_not_start(server: Api) -> None:
    command = claimed_parent(server)
    sibling = server.claim_one("w2")
    child_of_sibling = ok(start_child(server, sibling))["execution_id"]
    unrelated = server.execute(HELLO)
    for xid in (unrelated, child_of_sibling):
        refused(
            server.post(f"/api/executions/{xid}/cancel", {}, role="worker", params=query(command)),
            "not_a_child",
        )
        refused(
            server.get(f"/api/executions/{xid}/status", role="worker", params=query(command)),
            "not_a_child",
        )
        assert ev.EXECUTION_CANCEL_REQUESTED not in server.event_types(xid)
    refused(server.post(f"/api/executions/{unrelated}/cancel", {}, role="worker"), "no_claim_proof")
    wrong = {**query(command), "parent_epoch": command["lease"]["epoch"] + 1}
    refused(
        server.post(f"/api/executions/{unrelated}/cancel", {}, role="worker", params=wrong),
        "stale_epoch",
    )


def test_other_roles_are_unchanged_and_a_proof_comes_whole(server: Api) -> None:
    command = claimed_parent(server)
    # an operator needs no proof; one it gives is checked like a worker's
    ok(server.post("/api/execute", {"path": "tests/hello"}, role="operator"))
    ok(start_child(server, command, role="operator"))
    body = error(
        start_child(server, command, role="operator", parent_epoch=command["lease"]["epoch"] + 1),
        403,
        "forbidden",
    )
    assert body["reason"] == "stale_epoch"
    # a viewer gets no further with a proof
    error(
        server.post(
            f"/api/executions/{command['execution_id']}/cancel",
            {},
            role="viewer",
            params=query(command),
        ),
        403,
        "forbidden",
    )
    before = executions(server)
    body = error(
        server.post(
            "/api/execute",
            {"path": "tests/hello", "parent_command_id": command["command_id"]},
            role="worker",
        ),
        422,
        "validation_error",
    )
    assert "parent_epoch" in body["message"]
    assert executions(server) == before


def test_a_claim_of_a_step_without_the_playbook_tool_starts_nothing(server: Api) -> None:
    for parent in (LOOP, HELLO):
        command = claimed_parent(server, parent)
        before = executions(server)
        body = refused(start_child(server, command), "not_a_playbook_step")
        assert (body["parent_command_id"], body["step"]) == (command["command_id"], command["step"])
        # an operator's proof is checked the same way
        body = error(start_child(server, command, role="operator"), 403, "forbidden")
        assert body["reason"] == "not_a_playbook_step"
        assert executions(server) == before


def test_a_claim_starts_only_the_path_its_playbook_tool_names(server: Api) -> None:
    command = claimed_parent(server)
    other = playbook(
        "tests/other", "workflow:\n  - step: s\n    tool: {kind: python, code: 'result = 1'}\n"
    )
    server.register(other)
    before = executions(server)
    for body in ({"path": "tests/other"}, {"catalog_id": "tests/other@1"}):
        reply = server.post("/api/execute", {**body, **proof(command)}, role="worker")
        refused_body = refused(reply, "other_playbook")
        assert refused_body["path"] == "tests/other" and "tests/hello" in refused_body["message"]
    # a path that is not in the catalog is refused before the catalog is looked at
    refused(
        server.post("/api/execute", {"path": "tests/nowhere", **proof(command)}, role="worker"),
        "other_playbook",
    )
    assert executions(server) == before
    ok(
        server.post(
            "/api/execute", {"catalog_id": "tests/hello@1", **proof(command)}, role="worker"
        )
    )


def test_a_templated_playbook_path_admits_any_catalog_path(server: Api) -> None:
    command = claimed_parent(server, TEMPLATED)
    server.register(LOOP)
    child = ok(
        server.post("/api/execute", {"path": "tests/loop", **proof(command)}, role="worker")
    )["execution_id"]
    assert server.store.get_execution(int(child)).path == "tests/loop"
