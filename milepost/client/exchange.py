"""What both clients do around a request: the servers' URLs and token, the read timeout
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


class Servers:
    """The servers a client may ask (`MILEPOST_SERVER_URL`, comma-separated: servers of one
    database), and the one it asks now. When that one does not answer, the client moves to
    the next (the request fails as unavailable; the caller's retry goes there): a worker
    whose server died claims, reports and heartbeats through another, which takes them
    (its leases are in the shared database)."""

    def __init__(self, urls: list[str]) -> None:
        if not urls:
            raise NoServer()
        self.urls = urls
        self._at = 0

    @property
    def current(self) -> str:
        return self.urls[self._at]

    def failed(self, url: str) -> bool:
        """`url` did not answer: move on from it, unless the client moved already (another
        request failed first). True when the client asks another server now."""
        if len(self.urls) == 1 or url != self.current:
            return False
        self._at = (self._at + 1) % len(self.urls)
        return True


def connection(server_url: str | None, token: str | None) -> tuple[Servers, dict[str, str]]:
    """The servers (`server_url`, else `MILEPOST_SERVER_URL`: one URL or several,
    comma-separated) and the headers of every request (the token: `token`, else
    `MILEPOST_TOKEN`)."""
    given = server_url or os.environ.get("MILEPOST_SERVER_URL") or ""
    urls = [url.strip().rstrip("/") for url in given.split(",") if url.strip()]
    token = token or os.environ.get("MILEPOST_TOKEN") or None
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return Servers(urls), headers


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
