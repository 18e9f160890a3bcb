"""The http tool (DSL 3.2) on a shared httpx.AsyncClient."""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import time
import weakref
from collections.abc import Mapping
from typing import Any

import httpx

from milepost.tools import base

DEFAULT_TIMEOUT = 30.0
RETRYABLE = frozenset({"rate_limit", "server_error", "timeout", "connection"})


class HttpTool:
    """Runs http calls; keeps one AsyncClient per event loop (clients are loop-bound).

    Args:
        transport: an httpx transport to use instead of the network (tests).
    """

    def __init__(self, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._transport = transport
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            client = httpx.AsyncClient(
                transport=self._transport,
                timeout=DEFAULT_TIMEOUT,
                follow_redirects=True,
                limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
            )
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close the client of the running loop; forget the others."""
        loop = asyncio.get_running_loop()
        clients, self._clients = self._clients, weakref.WeakKeyDictionary()
        client = clients.get(loop)
        if client is not None:
            await client.aclose()

    async def run(self, call: base.ToolCall) -> base.ToolResult:
        try:
            request = build_request(call)
        except ValueError as exc:
            return base.failure("invalid", str(exc))
        method, url = request["method"], request["url"]
        try:
            async with asyncio.timeout(call.timeout):
                response = await self.client().request(**request)
        except httpx.TimeoutException as exc:
            return base.failure(
                "timeout",
                f"{type(exc).__name__} on {method} {url}: {exc}",
                code=type(exc).__name__,
                retryable=True,
            )
        except TimeoutError:
            return base.failure(
                "timeout",
                f"http request exceeded timeout of {call.timeout:g}s: {method} {url}",
                code="Timeout",
                retryable=True,
            )
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            return base.failure("invalid", f"{method} {url}: {exc}", code=type(exc).__name__)
        except httpx.TooManyRedirects as exc:
            return base.failure("client_error", f"{method} {url}: {exc}", code=type(exc).__name__)
        except httpx.HTTPError as exc:
            return base.failure(
                "connection",
                f"{type(exc).__name__} on {method} {url}: {str(exc) or 'connection failed'}",
                code=type(exc).__name__,
                retryable=True,
            )
        return response_result(response, method, url)


def build_request(call: base.ToolCall) -> dict[str, Any]:
    """httpx.request keyword arguments for a call (ValueError if the call is unusable)."""
    config = call.config
    url = config.get("url") or config.get("endpoint")
    if not isinstance(url, str) or not url:
        raise ValueError("http tool needs `url` (a non-empty string)")
    method = str(config.get("method") or "GET").upper()
    headers = encode_headers(config.get("headers"))
    if (
        method != "GET"
        and call.idempotency_key
        and not any(name.lower() == "idempotency-key" for name in headers)
    ):
        headers["Idempotency-Key"] = call.idempotency_key
    request: dict[str, Any] = {
        "method": method,
        "url": url,
        "headers": headers,
        "params": encode_params(config.get("params")),
        "timeout": _timeout(config.get("timeout"), call.timeout),
        "follow_redirects": _flag(config.get("follow_redirects"), default=True),
    }
    body = config.get("body", config.get("data"))
    if config.get("json") is not None:
        request["json"] = config["json"]
    elif isinstance(body, str | bytes):
        request["content"] = body
    elif body is not None:
        request["json"] = body
    return request


def encode_headers(headers: Any) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise ValueError("http `headers` must be a mapping")
    return {str(k): param_text(v) for k, v in headers.items() if v is not None}


def encode_params(params: Any) -> list[tuple[str, str]]:
    """Query parameters as (name, text) pairs: nulls dropped, DSL 3.2 value forms."""
    if params is None:
        return []
    if not isinstance(params, Mapping):
        raise ValueError("http `params` must be a mapping")
    return [(str(k), param_text(v)) for k, v in params.items() if v is not None]


def param_text(value: Any) -> str:
    """`true`/`false`, plain integers, shortest float form, JSON text for lists/mappings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return str(value)


def response_result(response: httpx.Response, method: str, url: str) -> base.ToolResult:
    headers = {k.lower(): v for k, v in response.headers.items()}
    body = parse_body(response)
    data = {"status_code": response.status_code, "headers": headers, "data": body, "body": body}
    http = {"status": response.status_code, "headers": headers}
    status = response.status_code
    if 200 <= status < 300:
        return base.ToolResult(data=data, http=http)
    kind = status_kind(status)
    error = base.ToolFailure(
        kind,
        f"HTTP {status} from {method} {url}",
        code=f"HTTP_{status}",
        retryable=kind in RETRYABLE,
        status=status,
    )
    retry_after = parse_retry_after(headers.get("retry-after"))
    return base.ToolResult(data=data, error=error, http=http, retry_after=retry_after)


def parse_body(response: httpx.Response) -> Any:
    """JSON if the body parses as JSON, else text; an empty body is None."""
    if not response.content:
        return None
    text = response.text
    try:
        return json.loads(text)
    except ValueError:
        return text


def status_kind(status: int) -> str:
    if status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if status == 408:
        return "timeout"
    if status >= 500:
        return "server_error"
    return "client_error"  # other 4xx, and 1xx/3xx that were not followed


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(when.timestamp() - current, 0.0)


def _timeout(value: Any, call_timeout: float | None) -> float:
    try:
        seconds = DEFAULT_TIMEOUT if value is None else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"http `timeout` must be a number of seconds, not {value!r}") from None
    if not seconds > 0:
        raise ValueError("http `timeout` must be positive")
    return min(seconds, call_timeout) if call_timeout else seconds


def _flag(value: Any, *, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "off", "")
    return bool(value)
