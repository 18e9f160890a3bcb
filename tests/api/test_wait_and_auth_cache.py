"""The status long-poll (`?wait=`), the client's `wait` on it, and the per-app token cache."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest

from milepost.api import auth
from milepost.api.routers import executions
from milepost.client import AsyncMilepostClient, MilepostClient, WaitTimeout
from tests.api.support import HELLO, Api, error, ok, start_server
from tests.shared import wait_for, wait_for_async

LONG = 20.0
"""The `wait` of a long-poll that must come back long before it expires."""


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2) as executor:
        yield executor


def one_step_left(api: Api) -> tuple[str, dict[str, Any]]:
    """A HELLO run with `start` done and `shout` claimed: reporting it ends the run."""
    xid = api.execute(HELLO)
    api.complete(api.claim_one(), {"greeting": "Hello, World"})
    return xid, api.claim_one()


def reads_once(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set once the status route has read the status the first time (the long-poll waits)."""
    read = threading.Event()
    real = executions._status_out

    def status_out(*args: Any) -> Any:
        try:
            return real(*args)
        finally:
            read.set()

    monkeypatch.setattr(executions, "_status_out", status_out)
    return read


def long_poll(
    api: Api, pool: ThreadPoolExecutor, xid: str, wait: float
) -> Future[tuple[httpx2.Response, float]]:
    def call() -> tuple[httpx2.Response, float]:
        started = time.monotonic()
        response = api.get(f"/api/executions/{xid}/status", role="viewer", params={"wait": wait})
        return response, time.monotonic() - started

    return pool.submit(call)


# -- the route ------------------------------------------------------------------------------


def test_a_long_poll_wakes_when_this_server_ends_the_run(
    api: Api, pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executions, "STATUS_RECHECK", 60.0)  # only the runtime's wake-up counts
    xid, last = one_step_left(api)
    read = reads_once(monkeypatch)
    pending = long_poll(api, pool, xid, LONG)
    assert read.wait(10), "the long-poll never read the status"
    assert not pending.done()
    api.complete(last, {"loud": "HELLO, WORLD"})
    response, took = pending.result(timeout=LONG + 10)
    body = ok(response)
    assert body["status"] == "COMPLETED" and body["steps"]["shout"]["result"] == {
        "loud": "HELLO, WORLD"
    }
    assert took < LONG / 2, took
    assert len(api.services.engine.watchers) == 0  # nothing left behind


def test_a_long_poll_sees_a_run_ended_elsewhere_by_re_checking_the_store(
    api: Api, pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = api.services.engine
    monkeypatch.setattr(runtime, "watch", lambda *args: None)  # as if another server ended it
    xid, last = one_step_left(api)
    read = reads_once(monkeypatch)
    pending = long_poll(api, pool, xid, LONG)
    assert read.wait(10), "the long-poll never read the status"
    api.complete(last, {"loud": "HELLO, WORLD"})
    response, took = pending.result(timeout=LONG + 10)
    assert ok(response)["status"] == "COMPLETED"
    assert took < LONG / 2, took


def test_a_long_poll_on_a_run_that_does_not_end_answers_its_status_after_the_wait(api: Api) -> None:
    xid = api.execute(HELLO)
    started = time.monotonic()
    body = ok(api.get(f"/api/executions/{xid}/status", params={"wait": 0.6}))
    took = time.monotonic() - started
    assert body["status"] == "RUNNING" and body["execution_id"] == xid
    assert 0.55 <= took < 5, took


def test_a_long_poll_on_an_ended_run_answers_at_once(api: Api) -> None:
    xid = api.execute(HELLO)
    ok(api.post(f"/api/executions/{xid}/cancel"))
    started = time.monotonic()
    assert (
        ok(api.get(f"/api/executions/{xid}/status", params={"wait": LONG}))["status"] == "CANCELLED"
    )
    assert time.monotonic() - started < LONG / 2


@pytest.mark.parametrize("wait", ["-1", "1000", "60.5", "soon", "nan"])
def test_a_bad_wait_is_422(api: Api, wait: str) -> None:
    xid = api.execute(HELLO)
    body = error(
        api.get(f"/api/executions/{xid}/status", params={"wait": wait}), 422, "validation_error"
    )
    assert body["errors"][0]["loc"] == ["query", "wait"]


def test_an_unknown_execution_is_404_with_or_without_wait(api: Api) -> None:
    for params in ({}, {"wait": LONG}):
        started = time.monotonic()
        body = error(
            api.get("/api/executions/123/status", params=params), 404, "execution_not_found"
        )
        assert body["execution_id"] == "123" and time.monotonic() - started < LONG / 2


# -- the client -----------------------------------------------------------------------------


class Bridge:
    """An httpx transport handler answering through the app's TestClient; records requests."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.api.client.request(
            request.method,
            request.url.path,
            params=dict(request.url.params),
            content=request.content or None,
            headers={"authorization": request.headers.get("authorization", "")},
        )
        return httpx.Response(
            reply.status_code,
            content=reply.content,
            headers={"content-type": reply.headers.get("content-type", "")},
        )

    def waits(self) -> list[float]:
        return [float(r.url.params["wait"]) for r in self.requests if "wait" in r.url.params]


def sync_client(api: Api) -> tuple[MilepostClient, Bridge]:
    bridge = Bridge(api)
    client = MilepostClient(
        "http://milepost.test", api.tokens["viewer"], transport=httpx.MockTransport(bridge)
    )
    return client, bridge


def test_the_client_wait_long_polls_and_returns_the_terminal_status(
    api: Api, pool: ThreadPoolExecutor
) -> None:
    xid, last = one_step_left(api)
    client, bridge = sync_client(api)
    with client:
        pending = pool.submit(client.wait, xid, LONG)
        # the first long-poll is on its way
        wait_for(lambda: bridge.requests or pending.done(), "the client's first long-poll")
        assert bridge.requests, "the client never asked"
        api.complete(last, {"loud": "HELLO, WORLD"})
        status = pending.result(timeout=LONG + 10)
    assert status["status"] == "COMPLETED" and status["execution_id"] == xid
    assert bridge.waits() and all(0 < w <= LONG for w in bridge.waits()), bridge.waits()
    assert len(bridge.requests) <= 3, bridge.requests  # held replies, not a poll loop


def test_the_client_wait_times_out_without_busy_looping(api: Api) -> None:
    xid = api.execute(HELLO)
    client, bridge = sync_client(api)
    started = time.monotonic()
    with client, pytest.raises(WaitTimeout) as info:
        client.wait(xid, timeout=0.6)
    assert info.value.fields["execution_id"] == xid
    assert 0.55 <= time.monotonic() - started < 5
    assert 1 <= len(bridge.requests) <= 3, bridge.requests


def test_the_async_client_wait_returns_the_terminal_status(api: Api) -> None:
    xid, last = one_step_left(api)
    bridge = Bridge(api)

    async def scenario() -> dict[str, Any]:
        async def handler(request: httpx.Request) -> httpx.Response:
            return await asyncio.to_thread(bridge, request)  # the bridge blocks: not on this loop

        async with AsyncMilepostClient(
            "http://milepost.test", api.tokens["viewer"], transport=httpx.MockTransport(handler)
        ) as client:
            waiting = asyncio.ensure_future(client.wait(xid, timeout=LONG))
            await wait_for_async(lambda: bridge.requests, "the client's first long-poll")
            await asyncio.to_thread(api.complete, last, {"loud": "HELLO, WORLD"})
            return await asyncio.wait_for(waiting, LONG + 10)

    started = time.monotonic()
    status = asyncio.run(scenario())
    assert status["status"] == "COMPLETED" and time.monotonic() - started < LONG / 2
    assert bridge.waits() and len(bridge.requests) <= 3, bridge.requests


# -- the token cache ------------------------------------------------------------------------


def count_lookups(monkeypatch: pytest.MonkeyPatch, api: Api) -> list[str]:
    """The token hashes the store is asked about, from now on."""
    asked: list[str] = []
    real: Callable[[str], Any] = api.store.get_token

    def get_token(token_hash: str) -> Any:
        asked.append(token_hash)
        return real(token_hash)

    monkeypatch.setattr(api.store, "get_token", get_token)
    return asked


def test_a_token_used_twice_is_looked_up_once(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = count_lookups(monkeypatch, api)
    for _ in range(2):
        ok(api.get("/api/executions", role="viewer"))
    assert asked == [auth.token_hash(api.tokens["viewer"])]


def test_a_cached_token_is_looked_up_again_after_the_ttl(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = count_lookups(monkeypatch, api)
    ok(api.get("/api/executions", role="viewer"))
    cache: auth.TokenCache = api.client.app.state.token_cache  # type: ignore[attr-defined]
    now = time.monotonic()
    cache.clock = lambda: now + auth.TOKEN_CACHE_TTL + 0.1
    ok(api.get("/api/executions", role="viewer"))
    assert asked == [auth.token_hash(api.tokens["viewer"])] * 2


def test_an_unknown_token_is_still_401_every_time(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = count_lookups(monkeypatch, api)
    for _ in range(2):
        response = api.client.get("/api/executions", headers={"Authorization": "Bearer nope"})
        body = error(response, 401, "unauthorized")
        assert body["message"] == "unknown or revoked token"
        assert response.headers["www-authenticate"] == "Bearer"
    assert asked == [auth.token_hash("nope")] * 2  # a refusal is not remembered


def test_a_token_created_after_a_refusal_works_at_once(api: Api) -> None:
    token = auth.new_token()
    headers = {"Authorization": f"Bearer {token}"}
    error(api.client.get("/api/executions", headers=headers), 401, "unauthorized")
    api.store.create_token(auth.token_hash(token), "viewer", "late", time.time())
    ok(api.client.get("/api/executions", headers=headers))


def test_a_viewer_token_on_a_worker_route_is_still_403_when_cached(api: Api) -> None:
    ok(api.get("/api/executions", role="viewer"))  # now cached
    for _ in range(2):
        body = error(
            api.post("/api/commands/claim", {"worker_id": "w"}, role="viewer"), 403, "forbidden"
        )
        assert body == {
            "code": "forbidden",
            "role": "viewer",
            "message": "role 'viewer' may not claim commands or report events",
        }


def test_each_app_has_its_own_cache(api: Api, tmp_path: Path) -> None:
    token = api.tokens["viewer"]
    ok(api.get("/api/executions", role="viewer"))  # cached by the first app
    with start_server(f"sqlite:///{tmp_path / 'other.db'}") as other:
        response = other.client.get("/api/executions", headers={"Authorization": f"Bearer {token}"})
        error(response, 401, "unauthorized")
        assert other.client.app.state.token_cache is not api.client.app.state.token_cache  # type: ignore[attr-defined]


def test_the_cache_expires_entries_and_keeps_at_most_size_of_them() -> None:
    now = [0.0]
    cache = auth.TokenCache(store=None, ttl=5.0, size=2, clock=lambda: now[0])
    for key in ("a", "b", "c"):
        cache.put(key, auth.Principal("viewer", key))
    assert len(cache) == 2 and cache.get("a") is None  # the oldest went
    assert cache.get("b") == auth.Principal("viewer", "b")
    now[0] = 4.9
    assert cache.get("c") is not None
    now[0] = 5.0
    assert cache.get("b") is None and cache.get("c") is None and len(cache) == 0
