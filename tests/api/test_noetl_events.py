"""What NoETL workers post to the event routes (DSL 12.3, `milepost.api.noetl_events`):
results by reference, NoETL's batch form, empty batches, event types of NoETL's own and
payloads that are not objects. Each through the engine's checks and fence: on SQLite and
PostgreSQL (`db_url`)."""

from __future__ import annotations

from typing import Any

from tests.api.support import HELLO, Api, error, ok, report_wire, start_server

URI = "noetl://execution/1/result/start/42"


def completed(api: Api, command: dict[str, Any]) -> dict[str, Any]:
    """The attempt's `command.completed` with its result taken out (a NoETL worker that
    keeps it elsewhere reports the reference instead)."""
    [event] = [
        e
        for e in report_wire(command, {"greeting": "hi"})
        if e["event_type"] == "command.completed"
    ]
    context = dict(event["result"]["context"])
    context.pop("result", None)
    event["result"] = {"status": event["status"], "context": context}
    return event


def stored(api: Api, xid: str, event_type: str) -> list[dict[str, Any]]:
    events = ok(api.get(f"/api/executions/{xid}"))["events"]
    return [e for e in events if e["event_type"] == event_type]


def count(api: Api, xid: str) -> int:
    return len(ok(api.get(f"/api/executions/{xid}"))["events"])


def test_a_result_by_reference_is_the_steps_result_never_dropped(api: Api) -> None:
    """The bug: `result_kind: ref` with a `result_uri` was answered 200 and the reference
    dropped (an unknown field), the step's result null."""
    xid = api.execute(HELLO)
    command = api.claim_one()
    event = {**completed(api, command), "result_kind": "ref", "result_uri": URI}
    assert ok(api.post("/api/events", event, role="worker"))["stored"] == 1
    ref = {"kind": "ref", "uri": URI}
    assert api.status(xid)["steps"]["start"]["result"] == ref
    [done] = stored(api, xid, "command.completed")
    assert done["result"]["context"]["result"] == ref
    # the next step renders with it: `start` is the reference object
    nxt = api.claim_one()
    assert nxt["step"] == "shout" and nxt["context"]["start"] == ref


def test_results_by_event_ids_are_a_refs_object(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    event = {
        **completed(api, command),
        "result_kind": "refs",
        "event_ids": [command["event_id"], 7],
    }
    ok(api.post("/api/events/batch", {"events": [event]}, role="worker"))
    assert api.status(xid)["steps"]["start"]["result"] == {
        "kind": "refs",
        "event_ids": [str(command["event_id"]), "7"],
    }


def test_a_reference_without_what_it_names_or_given_twice_is_a_422(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    base = completed(api, command)
    before = count(api, xid)
    cases = [
        ({"result_kind": "ref"}, ["body", "result_uri"]),
        ({"result_kind": "refs"}, ["body", "event_ids"]),
        ({"result_kind": "data", "result_uri": URI}, ["body", "result_kind"]),
        ({"result_kind": "blob", "result_uri": URI}, ["body", "result_kind"]),
        ({"result_kind": "refs", "event_ids": []}, ["body", "event_ids"]),
        ({"result_kind": "refs", "event_ids": ["x1"]}, ["body", "event_ids", 0]),
    ]
    for change, loc in cases:
        body = error(
            api.post("/api/events", {**base, **change}, role="worker"), 422, "validation_error"
        )
        assert any(e["loc"] == loc for e in body["errors"]), (change, body["errors"])
    twice = {
        **base,
        "result_kind": "ref",
        "result_uri": URI,
        "result": {
            "status": "COMPLETED",
            "context": {**base["result"]["context"], "result": {"greeting": "hi"}},
        },
    }
    body = error(api.post("/api/events", twice, role="worker"), 422, "validation_error")
    assert body["errors"][0]["loc"] == ["body", "result_kind"]
    assert count(api, xid) == before
    assert api.status(xid)["steps"]["start"]["status"] == "RUNNING"


def test_a_batch_names_its_execution_and_worker_once_at_the_top(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    event = completed(api, command)
    del event["execution_id"]
    event["worker_id"] = None
    body = {"execution_id": xid, "worker_id": "noetl-worker-1", "events": [event]}
    assert ok(api.post("/api/events/batch", body, role="worker"))["stored"] == 1
    [done] = stored(api, xid, "command.completed")
    assert done["worker_id"] == "noetl-worker-1"
    assert api.status(xid)["steps"]["start"]["status"] == "COMPLETED"


def test_a_batch_event_without_execution_or_for_another_is_a_422(api: Api) -> None:
    xid = api.execute(HELLO)
    other = api.execute(HELLO)
    before = count(api, xid)
    nameless = {"event_type": "command.started"}
    body = error(
        api.post("/api/events/batch", {"events": [nameless]}, role="worker"),
        422,
        "validation_error",
    )
    assert body["errors"][0]["loc"] == ["body", "events", 0, "execution_id"]
    mixed = {"execution_id": xid, "events": [nameless, {**nameless, "execution_id": other}]}
    body = error(api.post("/api/events/batch", mixed, role="worker"), 422, "validation_error")
    assert [e["loc"] for e in body["errors"]] == [["body", "events", 1, "execution_id"]]
    assert count(api, xid) == before
    unknown = {"execution_id": "999", "events": [nameless]}
    error(api.post("/api/events/batch", unknown, role="worker"), 404, "execution_not_found")


def test_an_empty_batch_stores_nothing(api: Api) -> None:
    xid = api.execute(HELLO)
    before = count(api, xid)
    for body in ({"events": []}, {"execution_id": xid, "worker_id": "w", "events": []}):
        out = ok(api.post("/api/events/batch", body, role="worker"))
        assert (out["accepted"], out["stored"], out["event_ids"]) == (0, 0, [])
    assert count(api, xid) == before
    error(
        api.post("/api/events/batch", {"execution_id": "999", "events": []}, role="worker"),
        404,
        "execution_not_found",
    )
    # a viewer still may not post at all
    error(api.post("/api/events/batch", {"events": []}, role="viewer"), 403, "forbidden")


def test_a_type_the_engine_does_not_know_is_stored_informative_never_folded(
    api: Api, db_url: str
) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    progress = api.status(xid)
    noetl = {
        "execution_id": xid,
        "name": "step.result.preview",
        "node_name": "start",
        "payload": {"command_id": f"{xid}:start:1", "rows": 3},
        "meta": {"informative": False},
    }
    assert ok(api.post("/api/events", noetl, role="worker"))["stored"] == 1
    [note] = stored(api, xid, "step.result.preview")
    assert note["step"] == "start" and note["status"] == "INFO"
    assert note["meta"]["informative"] is True  # the server's mark, not the client's
    assert note["result"]["context"] == {"command_id": f"{xid}:start:1", "rows": 3}
    assert api.status(xid)["steps"] == progress["steps"]
    # the run goes on, and its log folds again from scratch (another server, same database)
    ok(
        api.post(
            "/api/events/batch", {"events": report_wire(command, {"greeting": "hi"})}, role="worker"
        )
    )
    with start_server(db_url) as again:
        assert again.status(xid)["steps"]["start"]["status"] == "COMPLETED"
    # still fenced: an unknown execution is a 404, an unknown step a 422
    error(
        api.post("/api/events", {**noetl, "execution_id": "999"}, role="worker"),
        404,
        "execution_not_found",
    )
    body = error(
        api.post("/api/events", {**noetl, "node_name": "nope"}, role="worker"),
        422,
        "validation_error",
    )
    assert body["errors"][0]["loc"] == ["body", "step"]
    # a worker's event: an operator may not post one
    error(api.post("/api/events", noetl, role="operator"), 403, "forbidden")


def test_a_payload_that_is_no_object_is_stored_without_context(api: Api) -> None:
    xid = api.execute(HELLO)
    api.claim_one()
    for i, payload in enumerate(([1, 2, 3], "done", 7, True)):
        event = {
            "execution_id": xid,
            "event_type": "command.started",
            "step": "start",
            "payload": payload,
            "event_id": None,
        }
        del event["event_id"]
        ok(api.post("/api/events", event, role="worker"))
        started = stored(api, xid, "command.started")[i]
        assert "context" not in started["result"], started
        assert started["meta"]["payload"] == payload
    # a report still needs its command: the payload it would carry it in is no object
    report = {
        "execution_id": xid,
        "event_type": "command.completed",
        "step": "start",
        "payload": [1],
        "meta": {"epoch": 1},
    }
    body = error(api.post("/api/events", report, role="worker"), 422, "validation_error")
    assert body["errors"][0]["loc"] == ["body", "context", "command_id"]
