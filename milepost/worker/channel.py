"""The worker's reports over `WS /api/worker/channel` (docs/server-contract.md).

`ChannelClient` is what the worker talks to: `post_events` (a report, with the claim of
the next commands) goes over one WebSocket, request by request, and everything else over
HTTP through the `AsyncMilepostClient` it wraps. A worker reports once per step; on an
open socket that costs about a tenth of the CPU of an HTTP request, on both sides.

Failures keep the worker's semantics: a socket that breaks or stops answering is dropped
and the call raises ServerUnavailable (the worker retries; the next call opens a new
socket, to the next server when it was given several), an error reply raises the ServerRefused the HTTP route would have. A server that
refuses the socket (one without the route, or a proxy that does not pass WebSockets) is
used over HTTP from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection, connect

from milepost.client import (
    AsyncMilepostClient,
    ServerRefused,
    ServerUnavailable,
    batch_body,
    error_of_body,
)

log = logging.getLogger(__name__)

PATH = "/api/worker/channel"


class _Refused(Exception):
    """The server answered the handshake with an HTTP status: no channel there."""


def ws_url(base_url: str, path: str = PATH) -> str:
    """`http(s)://host[:port][/prefix]` -> `ws(s)://host[:port][/prefix]/api/worker/channel`."""
    scheme, sep, rest = base_url.partition("://")
    ws_scheme = {"http": "ws", "https": "wss"}.get(scheme.lower(), scheme)
    return f"{ws_scheme}{sep}{rest.rstrip('/')}{path}"


class ChannelClient:
    """`AsyncMilepostClient` for the worker, with `post_events` over the worker channel."""

    def __init__(self, http: AsyncMilepostClient, *, timeout: float | None = None) -> None:
        self.http = http
        self.path = PATH
        self.timeout = timeout if timeout is not None else http.timeout
        self.refused: str | None = None
        """Why the server would not open the socket; reports go over HTTP from then on."""
        self._ws: ClientConnection | None = None
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)

    @property
    def url(self) -> str:
        """The channel of the server the HTTP client asks now."""
        return ws_url(self.http.base_url, self.path)

    async def _unavailable(self, why: str, base_url: str) -> ServerUnavailable:
        """The socket to `base_url` broke or would not open: dropped, and the next server
        asked from now on (a worker given several moves there, `exchange.Servers`)."""
        await self._drop()
        self.http.server_failed(base_url)
        return ServerUnavailable(
            f"worker channel {ws_url(base_url, self.path)}: {why}", url=base_url
        )

    # -- over HTTP, as the wrapped client does ---------------------------------------------

    async def claim_next(
        self,
        worker_id: str,
        limit: int = 1,
        lease_seconds: float | None = None,
        pool: str | None = None,
    ) -> list[dict[str, Any]]:
        return await self.http.claim_next(worker_id, limit, lease_seconds, pool)

    async def heartbeat(
        self, event_id: int | str, worker_id: str, epoch: int, lease_seconds: float | None = None
    ) -> dict[str, Any]:
        return await self.http.heartbeat(event_id, worker_id, epoch, lease_seconds)

    async def release(self, event_id: int | str, worker_id: str, epoch: int) -> dict[str, Any]:
        return await self.http.release(event_id, worker_id, epoch)

    async def machine_id(
        self,
        worker_id: str,
        machine_id: int | None = None,
        *,
        pool: str | None = None,
        worker: dict[str, Any] | None = None,
        release: bool = False,
    ) -> dict[str, Any]:
        return await self.http.machine_id(
            worker_id, machine_id, pool=pool, worker=worker, release=release
        )

    async def resource(self, path: str, version: int | None = None) -> dict[str, Any]:
        return await self.http.resource(path, version)

    async def credential(self, name: str) -> dict[str, Any] | None:
        return await self.http.credential(name)

    # -- over the channel ------------------------------------------------------------------

    async def post_events(
        self, events: list[dict[str, Any]], claim: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        if self.refused is not None:
            return await self.http.post_events(events, claim)
        body = batch_body(events, claim)
        async with self._lock:  # one request at a time: replies come in order
            base_url = self.http.base_url
            try:
                ws = await self._open()
            except _Refused as exc:
                self.refused = str(exc)
                log.warning(
                    "the server refused the worker channel (%s): reporting over HTTP",
                    exc,
                    extra={"action": "channel_refused"},
                )
                return await self.http.post_events(events, claim)
            msg_id = next(self._ids)
            try:
                await ws.send(json.dumps({"id": msg_id, "body": body}))
                reply = json.loads(await asyncio.wait_for(ws.recv(), self.timeout))
            except (websockets.ConnectionClosed, OSError, TimeoutError, ValueError) as exc:
                raise await self._unavailable(f"{type(exc).__name__}: {exc}", base_url) from exc
            if not isinstance(reply, dict) or reply.get("id") != msg_id:
                raise await self._unavailable("a reply out of order", base_url)
        return _result(reply)

    async def _open(self) -> ClientConnection:
        if self._ws is None:
            base_url = self.http.base_url
            try:
                # compression=None: the messages are small JSON; deflating each one cost
                # both ends more CPU than the bytes it saved (py-spy, W1 through a server)
                self._ws = await connect(
                    self.url,
                    additional_headers=self.http.headers,
                    open_timeout=self.timeout,
                    max_size=None,
                    compression=None,
                )
            except websockets.InvalidStatus as exc:
                raise _Refused(f"HTTP {exc.response.status_code}") from exc
            except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
                raise await self._unavailable(f"{type(exc).__name__}: {exc}", base_url) from exc
        return self._ws

    async def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):  # it is broken already
                await ws.close()

    async def aclose(self) -> None:
        async with self._lock:
            await self._drop()


def _result(reply: dict[str, Any]) -> dict[str, Any]:
    status = int(reply.get("status") or 500)
    body = reply.get("body")
    if status < 400 and isinstance(body, dict):
        return body
    if not isinstance(body, dict):
        raise ServerRefused(status, "invalid_response", "worker channel: a reply without a body")
    raise error_of_body(status, body)
