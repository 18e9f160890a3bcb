"""`WS /api/worker/channel`: the batch route's requests and replies over one WebSocket."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.websockets import WebSocketDisconnect

from milepost.api.routers import channel
from tests.api.support import Api, report_wire
from tests.sql import query

PATH = "/api/worker/channel"


def ask(ws: Any, msg_id: Any, body: Any) -> dict[str, Any]:
    ws.send_text(json.dumps({"id": msg_id, "body": body}))
    reply: dict[str, Any] = json.loads(ws.receive_text())
    return reply


def test_a_report_claims_the_next_command_as_the_batch_route_does(api: Api) -> None:
    xid = api.execute()
    first = api.claim_one()
    with api.client.websocket_connect(PATH, headers=api.headers("worker")) as ws:
        reply = ask(
            ws,
            1,
            {"events": report_wire(first, {"ok": 1}), "claim": {"worker_id": "w1", "limit": 5}},
        )
        assert reply["id"] == 1 and reply["status"] == 200, reply
        body = reply["body"]
        assert body["accepted"] == body["stored"] == 1 and body["stale"] == []
        [nxt] = body["commands"]
        assert nxt["execution_id"] == xid and nxt["lease"]["epoch"] == 1
        assert nxt["command_id"] != first["command_id"]
        # a second report of the same attempt: kept, but stale (the run no longer waits)
        again = ask(ws, 2, {"events": report_wire(first, {"ok": 2})})
        assert again["status"] == 200 and again["body"]["stale"] == again["body"]["event_ids"]
        assert "commands" not in again["body"]
    status = api.status(xid)
    assert status["steps"][first["step"]]["result"] == {"ok": 1}, "the stale report changed it"


def test_bad_messages_get_the_routes_errors_and_the_socket_stays_open(api: Api) -> None:
    xid = api.execute()
    with api.client.websocket_connect(PATH, headers=api.headers("worker")) as ws:
        ws.send_text("not json")
        reply = json.loads(ws.receive_text())
        assert reply["status"] == 422 and reply["body"]["code"] == "validation_error"
        shape = ask(ws, 3, ["events"])
        assert shape["status"] == 422 and shape["body"]["errors"][0]["loc"] == ["message"]
        empty = ask(ws, 4, {"events": "none"})  # an empty list is taken (DSL 12.3)
        assert empty["status"] == 422 and empty["body"]["errors"][0]["loc"][:2] == [
            "body",
            "events",
        ]
        unknown = ask(
            ws,
            5,
            {
                "events": [
                    {
                        "execution_id": xid,
                        "event_type": "command.completed",
                        "meta": {"epoch": 1},
                        "context": {"command_id": "12345"},
                    }
                ]
            },
        )
        assert (unknown["status"], unknown["body"]["code"]) == (404, "command_not_found")
        engine = ask(ws, 6, {"events": [{"execution_id": xid, "event_type": "step.exit"}]})
        assert engine["status"] == 422  # written by the engine only
        # still open: a good message after the bad ones is answered
        ok = ask(ws, 7, {"events": [{"execution_id": xid, "event_type": "command.heartbeat"}]})
        assert ok["status"] == 200 and ok["id"] == 7
    assert "step.exit" not in api.event_types(xid)


@pytest.mark.parametrize("role", [None, "viewer", "operator"])
def test_only_workers_and_admins_may_open_it(api: Api, role: str | None) -> None:
    with (
        pytest.raises(WebSocketDisconnect),
        api.client.websocket_connect(PATH, headers=api.headers(role)) as ws,
    ):
        ws.receive_text()


def test_a_revoked_token_stops_an_open_socket(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    xid = api.execute()
    heartbeat = {"events": [{"execution_id": xid, "event_type": "command.heartbeat"}]}
    with api.client.websocket_connect(PATH, headers=api.headers("worker")) as ws:
        assert ask(ws, 1, heartbeat)["status"] == 200
        query(api.store, "DELETE FROM token WHERE role = 'worker'")
        api.client.app.state.token_cache = None  # what its lifetime would do, at once
        assert ask(ws, 2, heartbeat)["status"] == 200  # one check holds RECHECK_SECONDS
        monkeypatch.setattr(channel, "RECHECK_SECONDS", 0.0)
        refused = ask(ws, 3, heartbeat)
        assert (refused["id"], refused["status"]) == (3, 401)
        assert refused["body"]["code"] == "unauthorized"
        with pytest.raises(WebSocketDisconnect):
            ws.receive_text()
