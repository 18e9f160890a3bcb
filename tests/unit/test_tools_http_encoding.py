"""milepost.tools.http: request building and response mapping, no network (DSL 3.2, 10.4)."""

from __future__ import annotations

import email.utils

import httpx
import pytest

from milepost.tools import base
from milepost.tools import http as http_tool


def call(**config: object) -> base.ToolCall:
    return base.ToolCall(
        kind="http", config=dict(config), input={}, context={}, idempotency_key="key-1"
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, "true"),
        (False, "false"),
        (7, "7"),
        (-3, "-3"),
        (4.0, "4.0"),
        (0.1, "0.1"),
        (1e20, "1e+20"),
        ("plain", "plain"),
        ([1, "a"], '[1,"a"]'),
        ({"x": [True, None]}, '{"x":[true,null]}'),
        ({"é": 1}, '{"é":1}'),
    ],
)
def test_param_text(value: object, text: str) -> None:
    assert http_tool.param_text(value) == text


def test_encode_params__drops_nulls_and_keeps_order() -> None:
    params = {"a": None, "b": True, "c": 3, "d": 4.0, "e": [1, 2], "f": {"k": "v"}, "g": "s"}
    assert http_tool.encode_params(params) == [
        ("b", "true"),
        ("c", "3"),
        ("d", "4.0"),
        ("e", "[1,2]"),
        ("f", '{"k":"v"}'),
        ("g", "s"),
    ]


def test_encode_params__query_string() -> None:
    request = httpx.Request(
        "GET", "http://x/p", params=http_tool.encode_params({"n": 2, "ok": False, "l": [1]})
    )
    assert request.url.query == b"n=2&ok=false&l=%5B1%5D"


@pytest.mark.parametrize(
    ("config", "query"),
    [
        ({"url": "http://x/p?error_type=404"}, b"error_type=404"),  # httpx dropped it
        ({"url": "http://x/p?a=1&a=2", "params": {"b": 3}}, b"a=1&a=2&b=3"),
        ({"url": "http://x/p", "params": {"b": 3}}, b"b=3"),
    ],
)
def test_build_request__keeps_the_urls_own_query(config: dict[str, object], query: bytes) -> None:
    request = http_tool.build_request(call(**config))
    built = httpx.Request(request["method"], request["url"], params=request.get("params"))
    assert built.url.query == query


@pytest.mark.parametrize("method", ["POST", "put", "PATCH", "DELETE"])
def test_build_request__sends_idempotency_key_on_non_get(method: str) -> None:
    request = http_tool.build_request(call(url="http://x", method=method))
    assert request["method"] == method.upper()
    assert request["headers"] == {"Idempotency-Key": "key-1"}


def test_build_request__get_sends_no_idempotency_key() -> None:
    assert http_tool.build_request(call(url="http://x"))["headers"] == {}


@pytest.mark.parametrize("name", ["Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY"])
def test_build_request__playbook_header_wins(name: str) -> None:
    request = http_tool.build_request(call(url="http://x", method="POST", headers={name: "mine"}))
    assert request["headers"] == {name: "mine"}


def test_build_request__defaults() -> None:
    request = http_tool.build_request(call(endpoint="http://x/legacy"))
    assert request["url"] == "http://x/legacy"
    assert request["method"] == "GET"
    assert request["timeout"] == 30.0
    assert request["follow_redirects"] is True
    assert "json" not in request and "content" not in request


@pytest.mark.parametrize(
    ("config", "key", "value"),
    [
        ({"json": {"a": 1}}, "json", {"a": 1}),
        ({"body": {"a": 1}}, "json", {"a": 1}),
        ({"body": [1, 2]}, "json", [1, 2]),
        ({"data": {"a": 1}}, "json", {"a": 1}),
        ({"body": "raw text"}, "content", "raw text"),
        ({"data": "a=1&b=2"}, "content", "a=1&b=2"),
    ],
)
def test_build_request__body_forms(config: dict[str, object], key: str, value: object) -> None:
    assert http_tool.build_request(call(url="http://x", method="POST", **config))[key] == value


def test_build_request__call_timeout_caps_request_timeout() -> None:
    capped = base.ToolCall("http", {"url": "http://x", "timeout": 10}, {}, {}, "k", timeout=2.0)
    assert http_tool.build_request(capped)["timeout"] == 2.0


@pytest.mark.parametrize(
    "config",
    [{}, {"url": ""}, {"url": "http://x", "params": [1]}, {"url": "http://x", "timeout": "soon"}],
)
def test_build_request__rejects_unusable_config(config: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        http_tool.build_request(call(**config))


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (429, "rate_limit", True),
        (401, "auth", False),
        (403, "auth", False),
        (404, "not_found", False),
        (408, "timeout", True),
        (400, "client_error", False),
        (422, "client_error", False),
        (500, "server_error", True),
        (503, "server_error", True),
    ],
)
def test_response_result__error_kinds(status: int, kind: str, retryable: bool) -> None:
    response = httpx.Response(status, json={"detail": "nope"})
    result = http_tool.response_result(response, "POST", "http://x/y")
    assert result.error == base.ToolFailure(
        kind,
        f"HTTP {status} from POST http://x/y",
        code=f"HTTP_{status}",
        retryable=retryable,
        status=status,
    )
    assert result.data["data"] == {"detail": "nope"}
    assert result.http == {"status": status, "headers": result.data["headers"]}


@pytest.mark.parametrize(
    ("response", "body"),
    [
        (httpx.Response(200, json={"a": [1]}), {"a": [1]}),
        (httpx.Response(200, text="hello"), "hello"),
        (httpx.Response(200, text="42", headers={"content-type": "text/plain"}), 42),
        (httpx.Response(204), None),
    ],
)
def test_response_result__body(response: httpx.Response, body: object) -> None:
    result = http_tool.response_result(response, "GET", "http://x")
    assert result.ok
    assert result.data["data"] == body
    assert result.data["body"] == body
    assert result.data["status_code"] == response.status_code


def test_response_result__header_names_are_lower_case() -> None:
    response = httpx.Response(
        200, headers={"X-Trace-ID": "t1", "Content-Type": "text/plain"}, text="ok"
    )
    headers = http_tool.response_result(response, "GET", "http://x").data["headers"]
    assert headers["x-trace-id"] == "t1"
    assert headers["content-type"] == "text/plain"
    assert all(name == name.lower() for name in headers)


def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 90, usegmt=True)
    assert http_tool.parse_retry_after("7") == 7.0
    assert http_tool.parse_retry_after(" 1.5 ") == 1.5
    assert http_tool.parse_retry_after(date, now=now) == 90.0
    assert (
        http_tool.parse_retry_after(email.utils.formatdate(now - 10, usegmt=True), now=now) == 0.0
    )
    assert http_tool.parse_retry_after("soon") is None
    assert http_tool.parse_retry_after("nan") is None
    assert http_tool.parse_retry_after(None) is None


def test_rate_limit_carries_retry_after() -> None:
    result = http_tool.response_result(
        httpx.Response(429, headers={"Retry-After": "3"}), "GET", "http://x"
    )
    assert result.retry_after == 3.0
    assert result.error is not None and result.error.kind == "rate_limit"
