"""The HTTP client against httpx.MockTransport: request shapes, replies, error mapping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from milepost.client import (
    AsyncMilepostClient,
    MilepostClient,
    NoServer,
    ServerRefused,
    ServerUnavailable,
    WaitTimeout,
)
from milepost.errors import MilepostError

Handler = Callable[[httpx.Request], httpx.Response]
URL = "http://milepost.test:8080"


class Recorder:
    """A MockTransport handler that records requests and answers from a routing table."""

    def __init__(self, routes: dict[tuple[str, str], Any]) -> None:
        self.routes = routes
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.routes.get((request.method, request.url.path))
        if answer is None:
            return httpx.Response(404, json={"code": "not_found", "message": request.url.path})
        if callable(answer):
            answer = answer(request)
        if isinstance(answer, httpx.Response):
            return answer
        return httpx.Response(200, json=answer)

    def body(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


def client(
    routes: dict[tuple[str, str], Any], token: str | None = "tok"
) -> tuple[MilepostClient, Recorder]:
    recorder = Recorder(routes)
    return MilepostClient(URL, token, transport=httpx.MockTransport(recorder)), recorder


def test_register_sends_the_content_with_the_bearer_token() -> None:
    api, rec = client(
        {("POST", "/api/catalog/register"): {"path": "p", "version": 2, "catalog_id": "p@2"}}
    )
    assert api.register("yaml: 1") == {"path": "p", "version": 2, "catalog_id": "p@2"}
    assert rec.body() == {"content": "yaml: 1"}
    assert rec.requests[0].headers["authorization"] == "Bearer tok"


def test_server_and_token_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MILEPOST_SERVER_URL", URL + "/")
    monkeypatch.setenv("MILEPOST_TOKEN", "env-token")
    rec = Recorder({("GET", "/health"): {"status": "ok"}})
    api = MilepostClient(transport=httpx.MockTransport(rec))
    assert api.health() == {"status": "ok"}
    assert str(rec.requests[0].url) == URL + "/health"
    assert rec.requests[0].headers["authorization"] == "Bearer env-token"


def test_no_server_url_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MILEPOST_SERVER_URL", raising=False)
    with pytest.raises(NoServer):
        MilepostClient()


def test_execute_returns_the_execution_id_as_a_string() -> None:
    api, rec = client({("POST", "/api/execute"): {"execution_id": 123, "status": "RUNNING"}})
    assert api.execute("p", {"a": 1}, version=3) == "123"
    assert rec.body() == {"path": "p", "workload": {"a": 1}, "version": 3}


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (409, {"code": "stale_epoch", "message": "epoch 1 is not live"}, "stale_epoch"),
        (401, {"code": "unauthorized", "message": "no token"}, "unauthorized"),
        (404, {"code": "execution_not_found", "message": "no execution 9"}, "execution_not_found"),
        (500, {"code": "internal", "message": "boom"}, "internal"),
    ],
)
def test_error_replies_become_api_errors_with_their_code(
    status: int, body: dict[str, Any], code: str
) -> None:
    api, _ = client({("POST", "/api/commands/5/heartbeat"): httpx.Response(status, json=body)})
    with pytest.raises(ServerRefused) as info:
        api.heartbeat(5, "w", 1)
    assert (info.value.status, info.value.code, info.value.message) == (
        status,
        code,
        body["message"],
    )
    assert isinstance(info.value, MilepostError)
    assert info.value.transient == (status >= 500)


def test_extra_error_fields_are_kept() -> None:
    reply = httpx.Response(
        422, json={"code": "playbook_invalid", "message": "2 problems", "problems": ["a", "b"]}
    )
    api, _ = client({("POST", "/api/catalog/register"): reply})
    with pytest.raises(ServerRefused) as info:
        api.register("x")
    assert info.value.fields["problems"] == ["a", "b"]
    assert info.value.to_dict()["code"] == "playbook_invalid"
    assert info.value.to_dict()["http_status"] == 422


def test_cancelling_an_ended_run_is_already_terminal_with_its_status() -> None:
    reply = httpx.Response(
        409,
        json={
            "code": "already_terminal",
            "status": "COMPLETED",
            "message": "execution 9 is already COMPLETED",
        },
    )
    api, _ = client({("POST", "/api/executions/9/cancel"): reply})
    with pytest.raises(ServerRefused) as info:
        api.cancel(9)
    assert info.value.code == "already_terminal" and info.value.status == 409
    assert info.value.fields["status"] == "COMPLETED"


def test_a_reply_that_is_not_json_is_still_an_api_error() -> None:
    api, _ = client({("GET", "/api/executions/1/status"): httpx.Response(502, text="Bad Gateway")})
    with pytest.raises(ServerRefused) as info:
        api.status(1)
    assert info.value.status == 502 and info.value.code == "internal"
    assert "Bad Gateway" in info.value.message


def test_an_unreachable_server_raises_server_unavailable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    api = MilepostClient(URL, transport=httpx.MockTransport(refuse))
    with pytest.raises(ServerUnavailable) as info:
        api.status(1)
    assert info.value.code == "server_unavailable"


OTHER = "http://other.test:8081"


def two_servers(dead: set[str]) -> Callable[[httpx.Request], httpx.Response]:
    """Two servers of one database; those of `dead` do not answer."""

    def answer(request: httpx.Request) -> httpx.Response:
        origin = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        if origin in dead:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"status": "ok", "server": origin})

    return answer


def test_a_client_given_several_servers_moves_to_the_next_when_one_stops_answering(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 33, item 8: `MILEPOST_SERVER_URL` takes several URLs, comma-separated; the
    failing request is unavailable (its caller retries), the retry goes to the next."""
    monkeypatch.setenv("MILEPOST_SERVER_URL", f" {URL}/ , {OTHER}")
    dead: set[str] = set()
    api = MilepostClient(transport=httpx.MockTransport(two_servers(dead)))
    assert api.servers.urls == [URL, OTHER] and api.health()["server"] == URL
    dead.add(URL)
    with pytest.raises(ServerUnavailable) as info:
        api.health()
    assert info.value.fields["url"] == URL
    assert api.health()["server"] == OTHER and api.base_url == OTHER
    dead.add(OTHER)
    dead.discard(URL)  # the first one is back: round the list
    with pytest.raises(ServerUnavailable):
        api.health()
    assert api.health()["server"] == URL

    async def the_async_client() -> None:
        answer = two_servers({URL})
        arrived: list[httpx.Request] = []
        both = asyncio.Event()

        async def in_flight(request: httpx.Request) -> httpx.Response:
            arrived.append(request)
            if len(arrived) == 2:
                both.set()
            if len(arrived) <= 2:  # both on their way when the server died
                await both.wait()
            return answer(request)

        transport = httpx.MockTransport(in_flight)
        async with AsyncMilepostClient(f"{URL},{OTHER}", transport=transport) as worker:
            # two requests in flight when the server died: one move, not two
            failed = await asyncio.gather(worker.health(), worker.health(), return_exceptions=True)
            assert all(isinstance(f, ServerUnavailable) for f in failed)
            assert (await worker.health())["server"] == OTHER

    asyncio.run(the_async_client())


def test_claims_heartbeats_and_releases_use_the_command_routes() -> None:
    cmd = {"command_id": "7", "lease": {"epoch": 2, "expires_at": "x"}}
    api, rec = client(
        {
            ("POST", "/api/commands/claim"): {"commands": [cmd]},
            ("POST", "/api/commands/7/claim"): cmd,
            ("POST", "/api/commands/7/heartbeat"): {"lease": {"epoch": 2}, "cancelled": False},
            ("POST", "/api/commands/7/release"): {"released": True},
        }
    )
    assert api.claim_next("w", limit=3, lease_seconds=10, pool="gpu") == [cmd]
    assert rec.body() == {"worker_id": "w", "limit": 3, "lease_seconds": 10, "pool": "gpu"}
    assert api.claim("7", "w") == cmd and rec.body() == {"worker_id": "w"}
    assert api.heartbeat(7, "w", 2, lease_seconds=10)["cancelled"] is False
    assert rec.body() == {"worker_id": "w", "epoch": 2, "lease_seconds": 10}
    assert api.release(7, "w", 2) == {"released": True}
    assert rec.body() == {"worker_id": "w", "epoch": 2}


def test_credential_asks_for_the_data_and_answers_none_when_missing() -> None:
    api, rec = client(
        {
            ("GET", "/api/credentials/pg main"): {
                "name": "pg main",
                "type": "postgres",
                "data": {"password": "x"},
            }
        }
    )
    assert api.credential("pg main") == {"password": "x", "type": "postgres"}
    assert rec.requests[-1].url.params["include_data"] == "true"
    assert rec.requests[-1].url.raw_path == b"/api/credentials/pg%20main?include_data=true"
    assert api.credential("other") is None


def test_events_follow_the_pages() -> None:
    def page(request: httpx.Request) -> dict[str, Any]:
        after = int(request.url.params.get("events_after", 0))
        events = [{"seq": s} for s in range(after + 1, min(after + 3, 5) + 1)]
        return {
            "events": events,
            "events_next": events[-1]["seq"] if events[-1]["seq"] < 5 else None,
        }

    api, rec = client({("GET", "/api/executions/9"): page})
    assert [e["seq"] for e in api.events(9)] == [1, 2, 3, 4, 5]
    assert len(rec.requests) == 2


def test_wait_polls_until_the_run_ends() -> None:
    statuses = iter(["RUNNING", "RUNNING", "COMPLETED"])
    api, rec = client(
        {
            ("GET", "/api/executions/9/status"): lambda r: {
                "execution_id": "9",
                "status": next(statuses),
            }
        }
    )
    assert api.wait(9, timeout=10)["status"] == "COMPLETED"
    assert len(rec.requests) == 3


def test_wait_times_out() -> None:
    api, _ = client({("GET", "/api/executions/9/status"): {"status": "RUNNING"}})
    with pytest.raises(WaitTimeout):
        api.wait(9, timeout=0.2)


def test_the_async_client_speaks_the_same_routes() -> None:
    async def scenario() -> None:
        rec = Recorder(
            {
                ("POST", "/api/events/batch"): {"accepted": 1, "stored": 1, "event_ids": ["1"]},
                ("POST", "/api/catalog/resource"): {"path": "p", "version": 1, "content": "c"},
                ("POST", "/api/commands/3/heartbeat"): httpx.Response(
                    409, json={"code": "stale_epoch", "message": "stale"}
                ),
                ("GET", "/api/executions/4/status"): {"status": "FAILED"},
            }
        )
        async with AsyncMilepostClient(URL, "t", transport=httpx.MockTransport(rec)) as api:
            assert (await api.post_events([{"event_id": "1"}]))["stored"] == 1
            assert rec.body() == {"events": [{"event_id": "1"}]}
            assert (await api.resource("p", 1))["content"] == "c"
            assert rec.body() == {"path": "p", "version": 1}
            with pytest.raises(ServerRefused) as info:
                await api.heartbeat(3, "w", 1)
            assert info.value.code == "stale_epoch" and info.value.status == 409
            assert (await api.wait(4, timeout=1))["status"] == "FAILED"
            assert await api.credential("nope") is None

    asyncio.run(scenario())
