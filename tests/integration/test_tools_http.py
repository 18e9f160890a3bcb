"""The http tool through ToolRuntime: an injected MockTransport, plus one real socket (DSL 3.2)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from milepost.tools import base
from milepost.tools.runtime import ToolRuntime

Handler = Callable[[httpx.Request], httpx.Response]


def http_call(timeout: float | None = None, **config: Any) -> base.ToolCall:
    return base.ToolCall("http", config, {}, {}, "idem-42", timeout=timeout)


def run(handler: Handler, *calls: base.ToolCall) -> list[base.ToolResult]:
    async def go() -> list[base.ToolResult]:
        async with ToolRuntime(1, http_transport=httpx.MockTransport(handler)) as runtime:
            return [await runtime.run(c) for c in calls]

    return asyncio.run(go())


def echo(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "method": request.method,
            "url": str(request.url),
            "headers": dict(request.headers),
            "body": request.content.decode(),
        },
        headers={"X-Served-By": "mock"},
    )


def test_get_result_shape() -> None:
    (result,) = run(
        echo, http_call(url="http://api.test/items", params={"page": 2, "q": None, "f": 1.0})
    )
    assert result.ok
    data = result.data
    assert data["status_code"] == 200
    assert data["data"] == data["body"]
    assert data["data"]["url"] == "http://api.test/items?page=2&f=1.0"
    assert data["headers"]["x-served-by"] == "mock"
    assert "idempotency-key" not in data["data"]["headers"]
    assert result.http == {"status": 200, "headers": data["headers"]}
    assert result.duration_ms > 0


def test_post_sends_idempotency_key_and_json() -> None:
    (result,) = run(
        echo,
        http_call(
            url="http://api.test/orders",
            method="post",
            json={"sku": "a"},
            headers={"X-Team": "ops"},
        ),
    )
    sent = result.data["data"]
    assert sent["method"] == "POST"
    assert sent["headers"]["idempotency-key"] == "idem-42"
    assert sent["headers"]["x-team"] == "ops"
    assert json.loads(sent["body"]) == {"sku": "a"}


def test_playbook_idempotency_header_is_kept() -> None:
    (result,) = run(
        echo, http_call(url="http://api.test/o", method="PUT", headers={"idempotency-KEY": "mine"})
    )
    assert result.data["data"]["headers"]["idempotency-key"] == "mine"


def test_raw_string_body() -> None:
    (result,) = run(echo, http_call(url="http://api.test/o", method="POST", data="a=1&b=2"))
    assert result.data["data"]["body"] == "a=1&b=2"


def test_error_keeps_the_response() -> None:
    def limited(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": "2"}, json={"error": "slow down"})

    (result,) = run(limited, http_call(url="http://api.test/x", method="POST"))
    assert result.error == base.ToolFailure(
        "rate_limit",
        "HTTP 429 from POST http://api.test/x",
        code="HTTP_429",
        retryable=True,
        status=429,
    )
    assert result.data["data"] == {"error": "slow down"}
    assert result.retry_after == 2.0
    assert result.http is not None and result.http["status"] == 429


def test_redirects_are_followed() -> None:
    def redirect(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/old":
            return httpx.Response(302, headers={"Location": "/new"})
        return httpx.Response(200, text="moved here")

    followed, not_followed = run(
        redirect,
        http_call(url="http://api.test/old"),
        http_call(url="http://api.test/old", follow_redirects=False),
    )
    assert followed.data["data"] == "moved here"
    assert not_followed.data["status_code"] == 302
    assert not_followed.error is not None and not_followed.error.code == "HTTP_302"


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (httpx.ConnectError("refused"), "connection"),
        (httpx.RemoteProtocolError("bad"), "connection"),
        (httpx.ReadTimeout("slow"), "timeout"),
    ],
)
def test_transport_errors(exc: Exception, kind: str) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise exc

    (result,) = run(fail, http_call(url="http://api.test/x"))
    assert result.error is not None
    assert (result.error.kind, result.error.retryable, result.error.code) == (
        kind,
        True,
        type(exc).__name__,
    )
    assert result.data is None and result.http is None


def test_call_timeout_is_enforced() -> None:
    async def go() -> base.ToolResult:
        async def stall(request: httpx.Request) -> httpx.Response:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        transport = httpx.MockTransport(stall)
        async with ToolRuntime(1, http_transport=transport) as runtime:
            return await runtime.run(http_call(url="http://api.test/x", timeout=0.2))

    result = asyncio.run(go())
    assert result.error is not None
    assert (result.error.kind, result.error.retryable) == ("timeout", True)


def test_invalid_config() -> None:
    (result,) = run(echo, http_call(method="GET"))
    assert result.error is not None and result.error.kind == "invalid"


class _EchoHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        payload = json.dumps(
            {
                "path": self.path,
                "key": self.headers.get("Idempotency-Key"),
                "json": json.loads(body),
            }
        ).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the access log
        pass


@pytest.fixture
def server_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_real_socket(server_url: str) -> None:
    async def go() -> base.ToolResult:
        async with ToolRuntime(1) as runtime:
            call = http_call(
                url=f"{server_url}/orders", method="POST", params={"dry": True}, body={"n": 1}
            )
            return await runtime.run(call)

    result = asyncio.run(go())
    assert result.ok, result.error
    assert result.data["status_code"] == 201
    assert result.data["data"] == {"path": "/orders?dry=true", "key": "idem-42", "json": {"n": 1}}
    assert result.data["headers"]["content-type"] == "application/json"


def test_connection_refused() -> None:
    async def go() -> base.ToolResult:
        async with ToolRuntime(1) as runtime:
            return await runtime.run(http_call(url="http://127.0.0.1:9/nothing", timeout=5))

    result = asyncio.run(go())
    assert result.error is not None
    assert (result.error.kind, result.error.retryable) == ("connection", True)
