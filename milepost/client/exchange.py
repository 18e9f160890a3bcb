"""What both clients do around a request: the server's URL and token, the read timeout
of a held reply, and the reading of a reply (or of no reply) into a value or an error."""

from __future__ import annotations

import os
from typing import Any

import httpx

from milepost.client.errors import NoServer, ServerRefused, ServerUnavailable, error_of
from milepost.client.routes import Call


def reply(call: Call, response: httpx.Response) -> Any:
    if call.none_on_404 and response.status_code == 404:
        return None
    if response.status_code >= 400:
        raise error_of(response)
    if not response.content:
        return call.parse({})
    try:
        body = response.json()
    except ValueError as exc:
        raise ServerRefused(
            response.status_code,
            "invalid_response",
            f"{call.method} {call.path}: the reply is not JSON",
        ) from exc
    return call.parse(body)


def connection(server_url: str | None, token: str | None) -> tuple[str, dict[str, str]]:
    url = server_url or os.environ.get("MILEPOST_SERVER_URL")
    if not url:
        raise NoServer()
    token = token or os.environ.get("MILEPOST_TOKEN") or None
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return url.rstrip("/"), headers


def unreachable(call: Call, base_url: str, exc: httpx.HTTPError) -> ServerUnavailable:
    return ServerUnavailable(
        f"{call.method} {base_url}{call.path}: {type(exc).__name__}: {exc}", url=base_url
    )


def timeout(default: httpx.Timeout, call: Call) -> httpx.Timeout:
    """The client's timeouts, with the read timeout stretched by what the call may be held."""
    if call.hold <= 0:
        return default
    read = None if default.read is None else default.read + call.hold
    return httpx.Timeout(connect=default.connect, read=read, write=default.write, pool=default.pool)
