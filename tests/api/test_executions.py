"""Execute, list, read, status and cancel."""

from __future__ import annotations

from tests.api.support import HELLO, LOOP, Api, error, ok, playbook, start_server


def test_execute_starts_a_run_with_the_workload_and_issues_its_first_command(api: Api) -> None:
    xid = api.execute(HELLO, workload={"name": "Ada"})
    assert xid.isdigit()
    state = api.status(xid)
    assert state["status"] == "RUNNING" and state["steps"]["start"]["status"] == "RUNNING"
    [command] = api.store.open_commands(int(xid))
    assert command.step == "start"
    events = api.store.load(int(xid))
    assert events[0].payload["workload"] == {"name": "Ada"}


SECRET_READER = playbook(
    "tests/secret_reader",
    """
workflow:
  - step: start
    tool: {kind: python, input: {pw: "{{ workload.db.password }}"}, code: "result = len(pw)"}
""",
)


def test_a_workload_password_is_masked_for_viewers_and_real_for_the_worker(api: Api) -> None:
    workload = {"db": {"password": "hunter2-real", "host": "db.internal"}, "name": "Ada"}
    xid = api.execute(SECRET_READER, workload=workload)
    page = api.get(f"/api/executions/{xid}", role="viewer")
    started = ok(page)["events"][0]
    assert started["result"]["context"]["workload"] == {
        "db": {"password": "***", "host": "db.internal"},
        "name": "Ada",
    }
    assert "hunter2-real" not in page.text
    [row] = api.store.open_commands(int(xid))
    as_viewer = api.get(f"/api/commands/{row.command_id}", role="viewer")
    assert ok(as_viewer)["context"]["workload"]["db"]["password"] == "***"
    assert "hunter2-real" not in as_viewer.text
    command = api.claim_one()  # what the worker renders `{{ workload.db.password }}` from
    assert command["context"]["workload"] == workload
    assert "hunter2-real" not in str(api.store.load(int(xid)))


def test_a_sealed_workload_under_another_key_is_503_not_a_500(db_url: str) -> None:
    with start_server(db_url) as first:
        xid = first.execute(SECRET_READER, workload={"db": {"password": "hunter2-real"}})
    with start_server(db_url) as other:  # another MILEPOST_SECRET_KEY: the seal's key is gone
        body = error(
            other.get(f"/api/executions/{xid}/status", params={"wait": 0}),
            503,
            "workload_unreadable",
        )
        assert "hunter2-real" not in str(body)


def test_execute_by_catalog_id_with_payload_alias_and_a_parent(api: Api) -> None:
    parent = api.execute(HELLO)
    entry = api.register(LOOP)
    reply = ok(
        api.post(
            "/api/execute",
            {
                "catalog_id": entry["catalog_id"],
                "payload": {"items": [7]},
                "parent_execution_id": parent,
            },
            role="operator",
        )
    )
    assert reply["status"] == "RUNNING"
    row = api.store.get_execution(int(reply["execution_id"]))
    assert row.parent_execution_id == int(parent) and row.path == "tests/loop"
    assert api.store.load(row.execution_id)[0].payload["workload"] == {"items": [7]}


def test_execute_refuses_unknown_playbooks_parents_and_bad_bodies_storing_nothing(api: Api) -> None:
    error(api.post("/api/execute", {"path": "nope"}), 404, "playbook_not_found")
    api.register(HELLO)
    error(
        api.post("/api/execute", {"path": "tests/hello", "version": 3}), 404, "playbook_not_found"
    )
    error(
        api.post("/api/execute", {"path": "tests/hello", "parent_execution_id": "123"}),
        404,
        "execution_not_found",
    )
    body = error(
        api.post("/api/execute", {"path": "tests/hello", "workload": [1]}), 422, "validation_error"
    )
    assert body["errors"][0]["loc"] == ["body", "workload"]
    error(
        api.post("/api/execute", {"path": "tests/hello", "parent_execution_id": "x1"}),
        422,
        "validation_error",
    )
    assert api.store.list_executions() == []


def test_list_filters_by_status_and_path_and_pages(api: Api) -> None:
    first = api.execute(HELLO)
    second = api.execute(LOOP)
    ok(api.post(f"/api/executions/{first}/cancel"))
    listing = ok(api.get("/api/executions", role="viewer"))
    assert {i["execution_id"] for i in listing["items"]} == {first, second}
    assert listing["limit"] == 100 and listing["offset"] == 0
    running = ok(api.get("/api/executions", params={"status": "RUNNING"}))["items"]
    assert [i["execution_id"] for i in running] == [second]
    by_path = ok(api.get("/api/executions", params={"path": "tests/hello"}))["items"]
    assert [(i["execution_id"], i["status"]) for i in by_path] == [(first, "CANCELLED")]
    page = ok(api.get("/api/executions", params={"limit": 1, "offset": 1}))
    assert len(page["items"]) == 1 and page["limit"] == 1 and page["offset"] == 1
    error(api.get("/api/executions", params={"limit": 0}), 422, "validation_error")
    error(api.get("/api/executions", params={"offset": -1}), 422, "validation_error")


def test_get_shows_the_execution_its_steps_and_pages_of_events(api: Api) -> None:
    xid = api.execute(HELLO)
    whole = ok(api.get(f"/api/executions/{xid}", role="approver"))
    assert whole["execution_id"] == xid and whole["path"] == "tests/hello"
    assert whole["status"] == "RUNNING" and whole["version"] == 1 and whole["error"] is None
    assert whole["steps"]["start"]["status"] == "RUNNING"
    types = [e["event_type"] for e in whole["events"]]
    assert types[:3] == ["execution.started", "step.enter", "command.issued"]
    issued = whole["events"][2]
    assert issued["result"]["status"] == "PENDING" and "command_id" in issued["result"]["context"]
    assert isinstance(issued["event_id"], str) and issued["seq"] == 3
    page = ok(api.get(f"/api/executions/{xid}", params={"events_limit": 2}))
    assert [e["seq"] for e in page["events"]] == [1, 2] and page["events_next"] == 2
    rest = ok(api.get(f"/api/executions/{xid}", params={"events_after": 2}))
    assert [e["seq"] for e in rest["events"]] == [3] and rest["events_next"] is None


def test_unknown_and_malformed_execution_ids(api: Api) -> None:
    for path in ("/api/executions/123", "/api/executions/123/status"):
        body = error(api.get(path), 404, "execution_not_found")
        assert body["execution_id"] == "123"
    error(api.post("/api/executions/123/cancel"), 404, "execution_not_found")
    body = error(api.get("/api/executions/abc"), 422, "validation_error")
    assert body["errors"][0]["loc"] == ["path", "execution_id"]


def test_cancel_ends_a_run_whose_commands_nobody_claimed(api: Api) -> None:
    xid = api.execute(HELLO)
    reply = ok(api.post(f"/api/executions/{xid}/cancel", role="operator"))
    assert reply == {"execution_id": xid, "status": "CANCELLED"}
    types = api.event_types(xid)
    assert "execution.cancel_requested" in types and types[-1] == "execution.cancelled"
    assert api.store.open_commands(int(xid)) == []
    before = api.store.event_count(int(xid))
    error(api.post(f"/api/executions/{xid}/cancel"), 409, "already_terminal")
    assert api.store.event_count(int(xid)) == before


def test_cancel_waits_for_a_claimed_command_and_heartbeats_say_cancelled(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    reply = ok(api.post(f"/api/executions/{xid}/cancel"))
    assert reply["status"] == "RUNNING"  # the claimed attempt is still running
    beat = ok(
        api.post(
            f"/api/commands/{command['command_id']}/heartbeat",
            {"worker_id": "w1", "epoch": command["lease"]["epoch"]},
            role="worker",
        )
    )
    assert beat["cancelled"] is True
    api.complete(command, {"greeting": "late"})
    assert api.status(xid)["status"] == "CANCELLED"
    assert "shout" not in api.status(xid)["steps"]


def test_a_status_no_run_can_have_is_refused_naming_the_choices(api: Api) -> None:
    """Found by the OpenAPI fuzz test: any text was taken as a status filter and answered
    with an empty list, so a typo (`status=complete`) looked like "no such runs"."""
    body = error(api.get("/api/executions", params={"status": "complete"}), 422, "validation_error")
    assert "status" in str(body) and "COMPLETED" in str(body)
