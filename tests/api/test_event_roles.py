"""Who may post which event: the event routes change nothing a role may not change through
the route made for it (`auth.EVENT_ROLES`), on `POST /api/events`, `/api/events/batch` and
the worker channel."""

from __future__ import annotations

import json
from typing import Any

import pytest

from milepost.api import auth, ingest
from milepost.core import events as ev
from tests.api.support import HELLO, ROLES, Api, error, ok

WORK = {"admin", "worker"}
OPERATE = {"admin", "operator"}
APPROVAL_TYPES = (
    ev.APPROVAL_REQUESTED,
    ev.APPROVAL_DECIDED,
    ev.APPROVAL_GRANTED,
    ev.APPROVAL_DENIED,
    ev.APPROVAL_EXPIRED,
    ev.APPROVAL_INVALIDATED,
)

# every event type -> the roles that may post it (None: nobody, the engine writes it)
EXPECTED: dict[str, set[str] | None] = {
    **{etype: None for etype in ingest.ENGINE_TYPES},
    ev.COMMAND_STARTED: WORK,
    ev.COMMAND_HEARTBEAT: WORK,
    ev.CALL_DONE: WORK,
    ev.CALL_ERROR: WORK,
    ev.COMMAND_COMPLETED: WORK,
    ev.COMMAND_FAILED: WORK,
    ev.EXECUTION_CANCEL_REQUESTED: OPERATE,
    # approvals are the engine's: a vote goes through the decision route and its checks
    **{etype: None for etype in APPROVAL_TYPES},
    # the store writes a claim's events in the claim's transaction: no client posts them
    ev.COMMAND_CLAIMED: None,
    ev.COMMAND_RELEASED: None,
}


def test_the_table_covers_every_event_type_and_only_client_ones() -> None:
    assert set(EXPECTED) == ev.EVENT_TYPES
    assert {t: set(r) for t, r in auth.EVENT_ROLES.items()} == {
        t: r for t, r in EXPECTED.items() if r is not None
    }
    assert set(auth.POST_EVENTS) == {"admin", "operator", "worker"}


def test_every_event_type_is_a_client_one_or_refused_as_the_engines() -> None:
    assert ingest.ENGINE_TYPES | auth.EVENT_ROLES.keys() == ev.EVENT_TYPES
    assert not ingest.ENGINE_TYPES & auth.EVENT_ROLES.keys()


def test_a_new_event_type_no_role_is_listed_for_is_refused(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the day a type joins the log without a line in the role table, nobody may post it
    monkeypatch.setattr(ev, "EVENT_TYPES", ev.EVENT_TYPES | {"step.paused"})
    xid = api.execute(HELLO)
    before = api.store.load(int(xid))
    event = {"execution_id": xid, "event_type": "step.paused", "step": "start"}
    for role in ("admin", "worker"):
        body = error(api.post("/api/events", event, role=role), 422, "validation_error")
        assert body["errors"][0]["loc"] == ["body", "event_type"]
        assert "written by the engine" in body["message"]
    assert api.store.load(int(xid)) == before


def test_a_worker_cannot_post_a_claim_or_a_release(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one("w1")
    before = api.store.load(int(xid))
    for etype in (ev.COMMAND_CLAIMED, ev.COMMAND_RELEASED):
        event = {
            "execution_id": xid,
            "event_type": etype,
            "step": "start",
            "context": {"command_id": command["command_id"]},
        }
        body = error(api.post("/api/events", event, role="worker"), 422, "validation_error")
        assert "written by the engine" in body["message"]
    assert api.store.load(int(xid)) == before


def first_command(api: Api, xid: str) -> int:
    return next(
        int(e.payload["command_id"])
        for e in api.store.load(int(xid))
        if e.event_type == ev.COMMAND_ISSUED
    )


def valid_event(api: Api, xid: str, etype: str) -> dict[str, Any]:
    """An event of `etype` that the server stores when the role may post it."""
    event: dict[str, Any] = {"execution_id": xid, "event_type": etype}
    if etype == ev.EXECUTION_CANCEL_REQUESTED:
        return event
    # a report of the queued command with epoch 0 is valid and stored stale: changes nothing
    return {
        **event,
        "step": "start",
        "meta": {"epoch": 0},
        "context": {"command_id": str(first_command(api, xid))},
    }


def post(api: Api, route: str, event: dict[str, Any], role: str) -> Any:
    if route == "/api/events":
        return api.post(route, event, role=role)
    return api.post(route, {"events": [event]}, role=role)


@pytest.mark.parametrize("route", ["/api/events", "/api/events/batch"])
def test_every_role_and_event_type_on_both_event_routes(api: Api, route: str) -> None:
    shared = api.execute(HELLO)
    for etype, allowed in EXPECTED.items():
        for role in ROLES:
            # a cancel that goes through ends the run: it gets a run of its own
            xid = api.execute(HELLO) if etype == ev.EXECUTION_CANCEL_REQUESTED else shared
            event = valid_event(api, xid, etype)
            before = api.store.load(int(xid))
            response = post(api, route, event, role)
            case = (route, etype, role, response.text)
            if allowed is not None and role in allowed:
                reply = ok(response)
                assert reply["stored"] == 1, case
                [eid] = reply["event_ids"]
                assert any(str(e.event_id) == eid for e in api.store.load(int(xid))), case
                continue
            if role not in auth.POST_EVENTS:
                body = error(response, 403, "forbidden")  # the route itself refuses
                assert body["role"] == role, case
            elif allowed is None:
                body = error(response, 422, "validation_error")  # no role may
                assert body["errors"][0]["loc"][-1] == "event_type", case
            else:
                body = error(response, 403, "forbidden")
                assert (body["role"], body["event_type"]) == (role, etype), case
                assert role in body["message"] and etype in body["message"], case
                where = (
                    ["body", "event_type"]
                    if route == "/api/events"
                    else ["body", "events", 0, "event_type"]
                )
                assert body["loc"] == where, case
            assert api.store.load(int(xid)) == before, case


def test_a_worker_token_cannot_cancel_a_run_through_the_events(api: Api) -> None:
    xid = api.execute(HELLO)
    error(api.post(f"/api/executions/{xid}/cancel", role="worker"), 403, "forbidden")
    cancel = {"execution_id": xid, "event_type": ev.EXECUTION_CANCEL_REQUESTED}
    for route, body in (("/api/events", cancel), ("/api/events/batch", {"events": [cancel]})):
        refused = error(api.post(route, body, role="worker"), 403, "forbidden")
        assert refused["event_type"] == ev.EXECUTION_CANCEL_REQUESTED
    with api.client.websocket_connect("/api/worker/channel", headers=api.headers("worker")) as ws:
        ws.send_text(json.dumps({"id": 1, "body": {"events": [cancel]}}))
        reply = json.loads(ws.receive_text())
    assert reply["status"] == 403 and reply["body"]["role"] == "worker", reply
    assert reply["body"]["loc"] == ["body", "events", 0, "event_type"]
    assert ev.EXECUTION_CANCEL_REQUESTED not in api.event_types(xid)
    assert api.status(xid)["status"] == "RUNNING"
    # the operator may, through either way
    ok(api.post("/api/events", cancel, role="operator"))
    assert api.status(xid)["status"] == "CANCELLED"


def test_one_refused_event_refuses_the_whole_batch(api: Api) -> None:
    xid = api.execute(HELLO)
    before = api.store.load(int(xid))
    heartbeat = valid_event(api, xid, ev.COMMAND_HEARTBEAT)
    cancel = valid_event(api, xid, ev.EXECUTION_CANCEL_REQUESTED)
    body = error(
        api.post("/api/events/batch", {"events": [heartbeat, cancel]}, role="worker"),
        403,
        "forbidden",
    )
    assert body["loc"] == ["body", "events", 1, "event_type"]
    assert body["event_type"] == ev.EXECUTION_CANCEL_REQUESTED
    assert api.store.load(int(xid)) == before
    both = ok(api.post("/api/events/batch", {"events": [heartbeat, cancel]}, role="admin"))
    assert both["stored"] == 2


@pytest.mark.parametrize("etype", APPROVAL_TYPES)
def test_an_approval_event_posted_even_by_an_admin_is_refused_and_nothing_stored(
    api: Api, etype: str
) -> None:
    xid = api.execute(HELLO)
    before = api.store.load(int(xid))
    vote = {
        "execution_id": xid,
        "event_type": etype,
        "step": "start",
        "context": {"approval_id": "1", "identity": "user:mallory", "decision": "approve"},
    }
    heartbeat = valid_event(api, xid, ev.COMMAND_HEARTBEAT)
    for route, body, loc in (
        ("/api/events", vote, ["body", "event_type"]),
        ("/api/events/batch", {"events": [heartbeat, vote]}, ["body", "events", 1, "event_type"]),
    ):
        refused = error(api.post(route, body, role="admin"), 422, "validation_error")
        assert refused["errors"][0]["loc"] == loc, refused
        assert "written by the engine" in refused["message"]
    # an approver token may not call the event routes at all
    error(api.post("/api/events", vote, role="approver"), 403, "forbidden")
    assert api.store.load(int(xid)) == before
    assert api.store.list_approvals(execution_id=int(xid)) == []
