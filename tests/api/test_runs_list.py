"""The web UI's runs list: `GET /api/executions` in keyset pages (`cursor`/`next`) with
each row's starter and progress; `GET /api/executions/stream`, its change stream (new and
ended runs, resumable, read roles only); and a page of `/events` read with its LIMIT."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx2

from milepost.api.routers import stream
from milepost.engine import event_query
from tests.api.support import HELLO, LOOP, Api, LiveServer, error, live_server, ok
from tests.api.test_stream import messages
from tests.shared import wait_for


def all_pages(api: Api, limit: int, **where: str) -> list[list[dict[str, Any]]]:
    pages, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": limit, **where}
        if cursor is not None:
            params["cursor"] = cursor
        reply = ok(api.get("/api/executions", params=params, role="viewer"))
        pages.append(reply["items"])
        cursor = reply["next"]
        if cursor is None:
            return pages


def test_cursor_pages_cover_every_run_once_and_keep_the_filters(api: Api) -> None:
    hello = [api.execute(HELLO) for _ in range(4)]
    loops = [api.execute(LOOP) for _ in range(3)]
    api.complete(api.claim_one())  # hello[0]'s start: still running
    for xid in hello[1:3]:
        ok(api.post(f"/api/executions/{xid}/cancel"))
    whole = [r["execution_id"] for r in ok(api.get("/api/executions"))["items"]]
    assert sorted(whole) == sorted(hello + loops)
    for limit in (1, 2, 7):
        pages = all_pages(api, limit)
        assert [r["execution_id"] for page in pages for r in page] == whole
        assert all(len(page) == limit for page in pages[:-1])  # a full page says "next"
    cancelled = all_pages(api, 1, status="CANCELLED")
    assert sorted(r["execution_id"] for p in cancelled for r in p) == sorted(hello[1:3])
    by_path = all_pages(api, 2, path="tests/loop")
    assert sorted(r["execution_id"] for p in by_path for r in p) == sorted(loops)


def test_a_row_shows_who_started_it_and_its_steps_done_of_all(api: Api) -> None:
    xid = api.execute(HELLO)
    [row] = ok(api.get("/api/executions"))["items"]
    assert row["started_by"] == "token:test-admin" and (row["steps_done"], row["steps_total"]) == (
        0,
        2,
    )
    api.complete(api.claim_one(), {"greeting": "hi"})
    [row] = ok(api.get("/api/executions"))["items"]
    assert row["execution_id"] == xid and (row["steps_done"], row["steps_total"]) == (1, 2)


def test_a_cursor_that_is_none_is_a_422_naming_it(api: Api) -> None:
    for bad in ("soon", "1.5", "nan:3", "1.5:-2"):
        body = error(api.get("/api/executions", params={"cursor": bad}), 422, "validation_error")
        assert body["errors"][0]["loc"] == ["query", "cursor"], bad


def test_an_events_page_reads_its_page_from_the_store_not_the_log(
    api: Api, monkeypatch: Any
) -> None:
    xid = api.execute(LOOP)
    for command in api.claim_next(limit=3):
        api.complete(command, 1)
    log = api.store.load(int(xid))
    assert len(log) > 12
    read: list[int] = []
    load = api.store.load

    def counting(*args: Any, **kw: Any) -> Any:
        found = load(*args, **kw)
        read.append(len(found))
        return found

    monkeypatch.setattr(api.store, "load", counting)
    page = ok(api.get(f"/api/executions/{xid}/events", params={"after": 2, "limit": 3}))
    assert [e["seq"] for e in page["events"]] == [e.seq for e in log[2:5]] and page["next"]
    assert read == [4]  # the page and one more to say there is more: not the whole log
    read.clear()
    page = ok(api.get(f"/api/executions/{xid}", params={"events_after": 1, "events_limit": 2}))
    assert [e["seq"] for e in page["events"]] == [e.seq for e in log[1:3]]
    assert max(read) <= 3


# -- the change stream --------------------------------------------------------------------


class Follower:
    """A client of the change stream on its own thread: its lines as they come."""

    def __init__(self, server: LiveServer, role: str = "viewer", **headers: str) -> None:
        self.lines: list[str] = []
        self.status: int | None = None
        self.stop = threading.Event()

        def read() -> None:
            with httpx2.stream(
                "GET",
                f"{server.url}/api/executions/stream",
                headers={**server.headers(role), **headers},
                timeout=30,
            ) as reply:
                self.status = reply.status_code
                for line in reply.iter_lines():
                    self.lines.append(line)
                    if self.stop.is_set():
                        return

        self.thread = threading.Thread(target=read, daemon=True)
        self.thread.start()

    def rows(self) -> list[dict[str, Any]]:
        return [
            {"id": m["id"], **json.loads(m["data"])}
            for m in messages("\n".join(self.lines))
            if m.get("event") == "execution"
        ]

    def seen(self, xid: str, status: str) -> bool:
        return any(r["execution_id"] == xid and r["status"] == status for r in self.rows())


def test_a_new_run_and_its_end_arrive_live_then_resume_after_an_id(
    db_url: str, monkeypatch: Any
) -> None:
    monkeypatch.setattr(stream, "KEEPALIVE", 0.0)  # a line every look: a stopped reader leaves
    with live_server(db_url) as server:
        follower = Follower(server)
        wait_for(lambda: follower.status is not None, "the stream to open")
        assert follower.status == 200
        xid = server.execute()
        wait_for(lambda: follower.seen(xid, "RUNNING"), "the new run on the stream")
        server.post(f"/api/executions/{xid}/cancel")
        wait_for(lambda: follower.seen(xid, "CANCELLED"), "its end on the stream")
        rows = [r for r in follower.rows() if r["execution_id"] == xid]
        assert rows[-1]["path"] == "tests/hello" and rows[-1]["steps_total"] == 2
        follower.stop.set()
        ids = [r["id"] for r in follower.rows()]
        # resumed after the new run's id: its end again, not its start
        first = next(
            r["id"]
            for r in follower.rows()
            if r["execution_id"] == xid and r["status"] == "RUNNING"
        )
        again = Follower(server, **{"Last-Event-ID": first})
        wait_for(lambda: again.seen(xid, "CANCELLED"), "the end after the resumed id")
        assert not again.seen(xid, "RUNNING")
        again.stop.set()
        later = Follower(server, role="admin", **{"Last-Event-ID": ids[-1]})
        other = server.execute()
        wait_for(lambda: later.seen(other, "RUNNING"), "a run after the last id")
        assert not later.seen(xid, "CANCELLED")
        later.stop.set()


def test_the_stream_needs_a_read_role_and_a_real_id(api: Api) -> None:
    error(api.get("/api/executions/stream", role=None), 401, "unauthorized")
    error(api.get("/api/executions/stream", role="worker"), 403, "forbidden")
    bad = api.client.get(
        "/api/executions/stream", headers={**api.headers("viewer"), "Last-Event-ID": "soon"}
    )
    assert error(bad, 422, "validation_error")["errors"][0]["loc"] == ["header", "last-event-id"]
    bad = api.get("/api/executions/stream", params={"after": "x"})
    assert error(bad, 422, "validation_error")["errors"][0]["loc"] == ["query", "after"]


def test_a_filtered_page_and_a_tail_read_the_log_in_chunks_with_the_same_answer(
    api: Api, monkeypatch: Any
) -> None:
    xid = api.execute(LOOP)
    for command in api.claim_next(limit=3):
        api.complete(command, 1)
    url = f"/api/executions/{xid}/events"
    cases = [
        {"type": "command", "limit": 2},
        {"type": "command", "after": 4, "limit": 50},
        {"step": "each", "tail": 3},
        {"tail": 4},
    ]
    whole = [ok(api.get(url, params=p)) for p in cases]
    read: list[int] = []
    load = api.store.load

    def counting(*args: Any, **kw: Any) -> Any:
        found = load(*args, **kw)
        read.append(len(found))
        return found

    monkeypatch.setattr(event_query, "CHUNK", 2)
    monkeypatch.setattr(api.store, "load", counting)
    assert [ok(api.get(url, params=p)) for p in cases] == whole
    assert read and max(read) <= 2  # never more than a chunk at once


def test_a_run_says_where_its_log_ends_so_its_stream_is_followed_from_there(api: Api) -> None:
    """The run page reads the run, then follows its stream from `last_seq`: only what comes
    next, never the backlog the page reads in pages anyway."""
    xid = api.execute(LOOP)
    run = ok(api.get(f"/api/executions/{xid}", params={"events_limit": 0}, role="viewer"))
    assert run["events"] == [] and run["last_seq"] == api.store.load(int(xid))[-1].seq
    for command in api.claim_next(limit=3):
        api.complete(command, 1)
    later = ok(api.get(f"/api/executions/{xid}", params={"events_limit": 0}))
    assert later["last_seq"] == api.store.load(int(xid))[-1].seq > run["last_seq"]
