"""`GET /api/executions/{id}/stream`: a run's events as server-sent events, in order with
their seqs as ids, resumable with `after` or `Last-Event-ID`, live, then `event: end`."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx2

from milepost.api.routers import stream
from tests.api.support import HELLO, Api, error, live_server, ok, report_wire
from tests.api.test_executions import SECRET_READER
from tests.shared import wait_for


def messages(text: str) -> list[dict[str, Any]]:
    """The SSE messages of `text` as {id, event, data}; comments dropped."""
    out = []
    for block in text.split("\n\n"):
        fields: dict[str, Any] = {}
        for line in block.splitlines():
            if line.startswith(":") or ": " not in line:
                continue
            name, value = line.split(": ", 1)
            fields[name] = value
        if fields:
            out.append(fields)
    return out


def finished(api: Api) -> str:
    xid = api.execute(HELLO)
    api.complete(api.claim_one(), {"greeting": "hi"})
    api.complete(api.claim_one(), {"shout": "HI"})
    assert api.status(xid)["status"] == "COMPLETED"
    return xid


def test_a_finished_run_streams_every_event_in_order_then_end(api: Api) -> None:
    xid = finished(api)
    events = ok(api.get(f"/api/executions/{xid}/events"))["events"]
    reply = api.get(f"/api/executions/{xid}/stream", role="viewer")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    *sent, end = messages(reply.text)
    assert [m["id"] for m in sent] == [str(e["seq"]) for e in events]
    assert [m["event"] for m in sent] == [e["event_type"] for e in events]
    assert [json.loads(m["data"]) for m in sent] == events  # as /events shows each one
    assert end["event"] == "end" and json.loads(end["data"]) == {"status": "COMPLETED"}


def test_after_and_last_event_id_resume_with_exactly_the_later_events(api: Api) -> None:
    xid = finished(api)
    seqs = [e["seq"] for e in ok(api.get(f"/api/executions/{xid}/events"))["events"]]
    url = f"/api/executions/{xid}/stream"

    def get(last_event_id: str | None = None, **kw: Any) -> httpx2.Response:
        extra = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
        return api.client.get(url, headers={**api.headers("admin"), **extra}, **kw)

    def ids(last_event_id: str | None = None, **kw: Any) -> list[str]:
        return [m["id"] for m in messages(get(last_event_id, **kw).text) if m["event"] != "end"]

    assert ids(params={"after": seqs[2]}) == [str(s) for s in seqs[3:]]
    assert ids(str(seqs[1])) == [str(s) for s in seqs[2:]]
    assert ids("0", params={"after": seqs[3]}) == [str(s) for s in seqs[4:]]  # query wins
    assert ids(params={"after": seqs[-1]}) == []
    bad = get("soon")
    assert error(bad, 422, "validation_error")["errors"][0]["loc"] == ["header", "last-event-id"]


def test_an_unknown_run_is_a_json_404_before_any_stream(api: Api) -> None:
    reply = api.get("/api/executions/424242/stream")
    error(reply, 404, "execution_not_found")
    assert reply.headers["content-type"].startswith("application/json")


def test_a_live_run_streams_new_events_as_they_come_then_end(db_url: str) -> None:
    with live_server(db_url) as server:
        worker = server.headers("worker")
        xid = server.execute(HELLO)
        seen: list[str] = []

        def read() -> None:
            with httpx2.stream(
                "GET",
                f"{server.url}/api/executions/{xid}/stream",
                headers=server.headers("viewer"),
                timeout=30,
            ) as reply:
                for line in reply.iter_lines():
                    seen.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()

        def step(name: str) -> None:
            commands = ok(
                httpx2.post(
                    f"{server.url}/api/commands/claim",
                    json={"worker_id": "w1"},
                    headers=worker,
                    timeout=10,
                )
            )["commands"]
            assert [c["step"] for c in commands] == [name], commands
            ok(
                httpx2.post(
                    f"{server.url}/api/events/batch",
                    json={"events": report_wire(commands[0], {"ok": name})},
                    headers=worker,
                    timeout=10,
                )
            )

        wait_for(lambda: "event: command.issued" in seen, "the backlog to arrive")
        assert "event: end" not in seen  # the run is live: the stream waits
        step("start")
        wait_for(lambda: "event: command.completed" in seen, "start's completion live")
        assert "event: end" not in seen
        step("shout")
        reader.join(30)
        assert not reader.is_alive(), "the stream did not end with the run"
    sent = messages("\n".join(seen))
    assert sent[-1]["event"] == "end"
    ids = [int(m["id"]) for m in sent[:-1]]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert [m["event"] for m in sent].count("command.completed") == 2


def test_the_backlog_goes_in_pages_with_the_same_events(api: Api, monkeypatch: Any) -> None:
    xid = finished(api)
    whole = messages(api.get(f"/api/executions/{xid}/stream").text)
    monkeypatch.setattr(stream, "PAGE", 2)  # 8 events: four looks at the store
    assert messages(api.get(f"/api/executions/{xid}/stream").text) == whole


def test_a_quiet_stream_keeps_alive_and_a_gone_client_ends_its_loop(
    db_url: str, monkeypatch: Any
) -> None:
    monkeypatch.setattr(stream, "KEEPALIVE", 0.0)  # a comment after every quiet look
    with live_server(db_url) as server:
        admin = server.headers("admin")
        xid = server.execute(HELLO)
        watchers = server.services.engine.watchers
        with httpx2.stream(
            "GET", f"{server.url}/api/executions/{xid}/stream", headers=admin, timeout=30
        ) as reply:
            lines = reply.iter_lines()
            assert next(line for line in lines if line.startswith(":")) == ": keepalive"
            assert len(watchers) == 1
        wait_for(lambda: len(watchers) == 0, "the server to notice the client left")


def test_a_secret_is_masked_in_the_stream_as_in_the_events(api: Api) -> None:
    xid = api.execute(SECRET_READER, workload={"db": {"password": "hunter2-real"}})
    api.complete(api.claim_one(), 12)
    text = api.get(f"/api/executions/{xid}/stream", role="viewer").text
    events = ok(api.get(f"/api/executions/{xid}/events", role="viewer"))["events"]
    assert "hunter2-real" not in text
    assert [json.loads(m["data"]) for m in messages(text)[:-1]] == events
