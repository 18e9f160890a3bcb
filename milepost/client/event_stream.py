"""A run's events read from `GET /api/executions/{id}/stream` (server-sent events) as the
server sends them, instead of asking for a page every half second.

The reader hands out each event once: after a dropped connection (a proxy's idle cut, a
server restart) it connects again with `after=<the seq of the last event handed out>`, so
the server sends only what came after it. A server without the route (it answers 404: an
older server) raises `NoStream` before any event, carrying where to poll from.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
from httpx_sse import EventSource

from milepost.client import routes
from milepost.client.errors import ServerRefused, ServerUnavailable, error_of

RECONNECTS = 6
"""Connects in a row that may fail (the first again at once, then backing off 0.2 s
doubling to 2 s: about 5 s of a server gone) before the follow gives up."""
READ_TIMEOUT = 50.0
"""Seconds without a byte before the connection counts as dropped: the server sends a
keepalive comment every 15 s (`api.routers.stream.KEEPALIVE`), so three were lost."""


class NoStream(Exception):
    """The server answered 404 to the stream route: poll from `after` instead."""

    def __init__(self, after: int) -> None:
        super().__init__(f"no event stream; poll after seq {after}")
        self.after = after


def follow(
    http: httpx.Client, base_url: str, execution_id: int | str, after: int
) -> Iterator[dict[str, Any]]:
    """The run's events past seq `after` as they are stored (in the shape of `/events`),
    until the server sends `end` (the run ended and its last event was sent)."""
    path = f"/api/executions/{routes.key(execution_id)}/stream"
    failures = 0
    timeout = httpx.Timeout(
        connect=http.timeout.connect,
        read=READ_TIMEOUT,
        write=http.timeout.write,
        pool=http.timeout.pool,
    )
    while True:
        error: ServerRefused | httpx.HTTPError | None = None
        try:
            with http.stream(
                "GET",
                path,
                params={"after": after},
                timeout=timeout,
                headers={"Accept": "text/event-stream"},
            ) as response:
                if response.status_code == 404:
                    raise NoStream(after)
                if response.status_code >= 400:
                    response.read()
                    error = error_of(response)
                    if not error.transient:
                        raise error
                    # a 503 (the store gone for a moment), a 429: connect again, as on a drop
                else:
                    for message in EventSource(response).iter_sse():
                        failures = 0  # the server answers: a later drop starts a new count
                        if message.event == "end":
                            return
                        event = json.loads(message.data)
                        yield event
                        after = int(message.id or event["seq"])
        except httpx.HTTPError as exc:
            error = exc
        # dropped, or closed without `end` (the server stopped): connect again after `after`
        failures += 1
        if failures > RECONNECTS:
            if isinstance(error, ServerRefused):
                raise error
            raise ServerUnavailable(
                f"GET {base_url}{path}: {type(error).__name__ if error else 'closed'}: {error}",
                url=base_url,
            ) from error
        time.sleep(min(0.2 * 2 ** (failures - 2), 2.0) if failures > 1 else 0)
