"""The conformance runner's `nats` need: `${NATS_URL}` filled in, the server probed."""

from __future__ import annotations

import socket

import pytest

from milepost.conformance import services


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_nats_makes_its_entries_skip_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"nats://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("MILEPOST_NATS_URL", url)
    with services.services_for({"nats"}, "postgresql://x@127.0.0.1:1/x") as found:
        assert found.placeholders["NATS_URL"] == url
        (why,) = found.missing(["nats"])
        assert why.startswith(f"needs nats (cannot connect to NATS at {url}")


def test_a_listening_server_meets_the_need(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"nats://127.0.0.1:{server.getsockname()[1]}"
        monkeypatch.setenv("MILEPOST_NATS_URL", url)
        with services.services_for({"nats"}, "postgresql://x@127.0.0.1:1/x") as found:
            assert found.missing(["nats"]) == []
            assert services.substitute("${NATS_URL}", found.placeholders) == url
