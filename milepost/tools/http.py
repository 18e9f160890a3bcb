"""The http tool (DSL 3.2) on a shared httpx.AsyncClient."""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import math
import ssl
import time
import weakref
from collections.abc import Mapping
from typing import Any

import httpx

from milepost.playbook.durations import parse_duration
from milepost.sanitize import Redactor
from milepost.tools import base, http_auth

DEFAULT_TIMEOUT = 30.0
RETRYABLE = frozenset({"rate_limit", "server_error", "timeout", "connection"})


class HttpTool:
    """Runs http calls; keeps one AsyncClient per event loop (clients are loop-bound) and
    TLS verification (`verify_ssl`, a setting of the client, not of a request).

    Args:
        transport: an httpx transport to use instead of the network (tests).
        credentials: how `auth` resolves a credential name (`http_auth`); None: none is
            registered.
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        credentials: base.CredentialLookup | None = None,
    ) -> None:
        self._transport = transport
        self.credentials = credentials
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[bool, httpx.AsyncClient]
        ] = weakref.WeakKeyDictionary()

    def client(self, verify: bool = True) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        clients = self._clients.setdefault(loop, {})
        client = clients.get(verify)
        if client is None or client.is_closed:
            client = httpx.AsyncClient(
                transport=self._transport,
                timeout=DEFAULT_TIMEOUT,
                follow_redirects=True,
                verify=verify,
                limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
            )
            clients[verify] = client
        return client

    async def aclose(self) -> None:
        """Close the clients of the running loop; forget the others."""
        loop = asyncio.get_running_loop()
        clients, self._clients = self._clients, weakref.WeakKeyDictionary()
        for client in clients.get(loop, {}).values():
            await client.aclose()

    async def run(self, call: base.ToolCall) -> base.ToolResult:
        try:
            auth = http_auth.auth_headers(call.config.get("auth"), self.credentials)
            request = build_request(call, auth.headers)
            verify = _flag(call.config.get("verify_ssl"), default=True)
        except ValueError as exc:
            return base.failure("invalid", str(exc))
        result = await self._send(call, request, verify)
        if not auth.secrets:
            return result
        # a server may echo the request's headers: what `auth` added is masked here, since
        # the attempt's redactor knows only the keychain's secrets
        redactor = Redactor(auth.secrets)
        error = result.error
        if error is not None:
            error = dataclasses.replace(error, message=redactor.text(error.message))
        return dataclasses.replace(
            result, data=redactor.value(result.data), http=redactor.value(result.http), error=error
        )

    async def _send(
        self, call: base.ToolCall, request: dict[str, Any], verify: bool
    ) -> base.ToolResult:
        method, url = request["method"], request["url"]
        try:
            async with asyncio.timeout(call.timeout):
                response = await self.client(verify).request(**request)
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
            unverified = _certificate_error(exc)
            if unverified is not None:
                # retrying cannot make an untrusted certificate trusted
                return base.failure(
                    "connection",
                    f"TLS certificate of {method} {url} could not be verified "
                    f"({unverified.verify_message or unverified.reason or unverified}); "
                    "set `verify_ssl: false` on the tool to skip verification",
                    code="CERTIFICATE_VERIFY_FAILED",
                    retryable=False,
                )
            return base.failure(
                "connection",
                f"{type(exc).__name__} on {method} {url}: {str(exc) or 'connection failed'}",
                code=type(exc).__name__,
                retryable=True,
            )
        return response_result(response, method, url)


def build_request(
    call: base.ToolCall, auth_headers: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """httpx.request keyword arguments for a call (ValueError if the call is unusable).
    `auth_headers` (from `auth`) are added unless the tool's `headers` set the same name."""
    config = call.config
    url = config.get("url") or config.get("endpoint")
    if not isinstance(url, str) or not url:
        raise ValueError("http tool needs `url` (a non-empty string)")
    method = str(config.get("method") or "GET").upper()
    headers = encode_headers(config.get("headers"))
    given = {name.lower() for name in headers}
    headers.update({k: v for k, v in (auth_headers or {}).items() if k.lower() not in given})
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
        "timeout": _timeout(config.get("timeout"), call.timeout),
        "follow_redirects": _flag(config.get("follow_redirects"), default=True),
    }
    if params := encode_params(config.get("params")):
        request["params"] = _with_query(url, params)
    # no `params` at all otherwise: httpx 0.28 replaces a URL's own query string with the
    # params given, even none (`?error_type=404` was dropped)
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


def _with_query(url: str, params: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The URL's own query parameters, then `params` (httpx would drop the first)."""
    try:
        own = httpx.URL(url).params.multi_items()
    except httpx.InvalidURL as exc:
        raise ValueError(f"http tool url {url!r}: {exc}") from None
    return [*own, *params]


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


def _certificate_error(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind a transport error, if that is what it
    is (httpx wraps the `ssl` error, sometimes twice)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _timeout(value: Any, call_timeout: float | None) -> float:
    # a duration as everywhere (`30`, `30s`, `1m`); a literal one was checked at load
    seconds = DEFAULT_TIMEOUT if value is None else parse_duration(value, "http `timeout`")
    if not seconds > 0:
        raise ValueError("http `timeout` must be positive")
    return min(seconds, call_timeout) if call_timeout else seconds


def _flag(value: Any, *, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "off", "")
    return bool(value)
