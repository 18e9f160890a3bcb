"""The CLI's follow of a server: a server without the stream route (404) followed by
polling from the last seq it gave, nothing twice."""

from __future__ import annotations

import json

import httpx
import pytest

from milepost.cli.reads import ServerRuns, follow
from milepost.client import MilepostClient
from milepost.client.errors import ServerRefused
from milepost.engine.event_query import EventQuery


def _event(seq: int, event_type: str, step: str | None = "start") -> dict[str, object]:
    return {"seq": seq, "event_type": event_type, "step": step}


def test_a_server_without_the_stream_is_polled_from_where_the_page_ended() -> None:
    asked: list[str] = []
    pages = {
        0: ([_event(1, "execution.started", None), _event(2, "step.enter")], "RUNNING"),
        2: ([_event(3, "step.exit")], "RUNNING"),
        3: ([_event(4, "execution.completed", None)], "COMPLETED"),
    }

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(f"{request.url.path}?{request.url.query.decode()}")
        if request.url.path.endswith("/stream"):
            return httpx.Response(404, json={"detail": "Not Found"})
        events, status = pages[int(request.url.params["after"])]
        return httpx.Response(
            200,
            json={"events": events, "next": None, "last_seq": events[-1]["seq"], "status": status},
        )

    where = ServerRuns(
        MilepostClient("http://milepost.test", transport=httpx.MockTransport(answer))
    )
    where.poll = 0.0
    got = [e["seq"] for e in follow(where, 7, EventQuery(), 0)]
    assert got == [1, 2, 3, 4]
    # the stream asked once, after the first page's end; then only pages
    assert [a for a in asked if a.endswith("stream?after=2")] == asked[1:2]
    assert len([a for a in asked if "/stream" in a]) == 1


def test_the_stream_is_filtered_as_the_page_was() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/stream"):
            body = "".join(
                f"id: {e['seq']}\nevent: {e['event_type']}\ndata: {json.dumps(e)}\n\n"
                for e in [
                    _event(2, "step.enter", "a"),
                    _event(3, "command.issued", "b"),
                    _event(4, "command.claimed", "b"),
                ]
            )
            return httpx.Response(
                200,
                text=body + "event: end\ndata: {}\n\n",
                headers={"content-type": "text/event-stream"},
            )
        return httpx.Response(
            200, json={"events": [], "next": None, "last_seq": 1, "status": "RUNNING"}
        )

    where = ServerRuns(
        MilepostClient("http://milepost.test", transport=httpx.MockTransport(answer))
    )
    got = [e["seq"] for e in follow(where, 7, EventQuery("b", ("command",)), 0)]
    assert got == [3, 4]


def _sse(*events: dict[str, object], end: bool = True) -> httpx.Response:
    body = "".join(
        f"id: {e['seq']}\nevent: {e['event_type']}\ndata: {json.dumps(e)}\n\n" for e in events
    )
    return httpx.Response(
        200,
        text=body + ("event: end\ndata: {}\n\n" if end else ""),
        headers={"content-type": "text/event-stream"},
    )


def test_a_503_or_a_close_without_end_connects_again_after_the_last_event() -> None:
    asked: list[str] = []
    replies = iter(
        [
            httpx.Response(503, json={"code": "store_unavailable", "message": "gone"}),
            _sse(_event(3, "step.enter"), end=False),  # the server stopped mid-run
            _sse(_event(4, "step.exit")),
        ]
    )

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.query.decode())
        return next(replies)

    client = MilepostClient("http://milepost.test", transport=httpx.MockTransport(answer))
    assert [e["seq"] for e in client.stream_events(7, after=2)] == [3, 4]
    assert asked == ["after=2", "after=2", "after=3"]


def test_a_refusal_that_will_not_pass_ends_the_follow() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, json={"code": "forbidden", "message": "a worker token"})

    client = MilepostClient("http://milepost.test", transport=httpx.MockTransport(answer))
    with pytest.raises(ServerRefused) as refused:
        list(client.stream_events(7))
    assert (refused.value.status, refused.value.code) == (403, "forbidden")  # not retried
