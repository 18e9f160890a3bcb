"""`ChannelClient` against a live server (uvicorn in a thread): reports over the WebSocket,
the batch route's errors, HTTP when the socket is refused, ServerUnavailable when down."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from milepost.api import auth
from milepost.api.app import create_app
from milepost.client import AsyncMilepostClient, ServerRefused, ServerUnavailable
from milepost.worker.channel import ChannelClient, ws_url
from tests.acceptance.harness import free_port
from tests.api.support import HELLO, report_wire, settings_for
from tests.shared import wait_for

DEADLINE = 20.0


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(server url, worker token) of a server on a fresh SQLite file."""
    app = create_app(settings_for(f"sqlite:///{tmp_path / 'live.db'}"))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(
        lambda: server.started or not thread.is_alive(), "the server to start", timeout=DEADLINE
    )
    assert server.started, "server did not start"
    store = app.state.services.store
    token = auth.create_token(store, "admin", "channel-test", time.time())
    try:
        yield f"http://127.0.0.1:{port}", token
    finally:
        server.should_exit = True
        thread.join(DEADLINE)


def test_ws_url_keeps_host_port_and_prefix() -> None:
    assert ws_url("http://h:1") == "ws://h:1/api/worker/channel"
    assert ws_url("https://h/mp/") == "wss://h/mp/api/worker/channel"


async def _first_command(http: AsyncMilepostClient) -> dict[str, Any]:
    await http.register(HELLO)
    await http.execute("tests/hello", {})
    [command] = await http.claim_next("w1", limit=1)
    return command


def test_a_report_goes_over_the_socket_and_claims_the_next_command(live: tuple[str, str]) -> None:
    url, token = live

    async def scenario() -> None:
        async with AsyncMilepostClient(url, token) as http:
            reports = ChannelClient(http)
            command = await _first_command(http)
            reply = await reports.post_events(
                report_wire(command, "hi"), {"worker_id": "w1", "limit": 4}
            )
            assert reply["stored"] == 1 and reports.refused is None
            assert isinstance(reply["commands"], list)
            with pytest.raises(ServerRefused) as refused:  # the route's errors, as ServerRefused
                await reports.post_events(
                    [{"execution_id": command["execution_id"], "event_type": "step.exit"}]
                )
            assert refused.value.status == 422 and refused.value.code == "validation_error"
            # the socket survived the error
            again = await reports.post_events(
                [{"execution_id": command["execution_id"], "event_type": "command.heartbeat"}]
            )
            assert again["stored"] == 1
            await reports.aclose()

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE))


def test_a_refused_socket_falls_back_to_http_for_good(live: tuple[str, str]) -> None:
    url, token = live

    async def scenario() -> None:
        async with AsyncMilepostClient(url, token) as http:
            reports = ChannelClient(http)
            reports.path = "/api/worker/no-such-channel"
            command = await _first_command(http)
            reply = await reports.post_events(
                report_wire(command, "hi"), {"worker_id": "w1", "limit": 4}
            )
            assert reply["stored"] == 1 and "commands" in reply  # answered over HTTP
            assert reports.refused is not None and "403" in reports.refused

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE))


def test_an_unreachable_server_is_server_unavailable() -> None:
    async def scenario() -> None:
        async with AsyncMilepostClient(f"http://127.0.0.1:{free_port()}", "t") as http:
            reports = ChannelClient(http, timeout=2.0)
            with pytest.raises(ServerUnavailable):
                await reports.post_events([{"execution_id": "1", "event_type": "x"}])
            assert reports.refused is None  # not refused: the next call tries the socket again

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE))
