"""Start-up: the secret key is required, NATS is optional, OpenAPI is served."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from fastapi.testclient import TestClient

from milepost.api import app as app_module
from milepost.api.app import create_app
from milepost.core.events import APPROVAL_GRANTED, new_event
from milepost.credentials import SecretKeyInvalid, SecretKeyMissing
from milepost.engine import notify
from milepost.engine.webhooks import WebhookNotifier, WebhookSecretMissing
from tests.api.support import HELLO, settings_for, start_server
from tests.shared import NATS_URL, require_nats, wait_for


@pytest.mark.parametrize("key", [None, "", "   "])
def test_the_server_refuses_to_start_without_a_secret_key(
    tmp_path: object, key: str | None
) -> None:
    db = tmp_path / "x.db"  # type: ignore[operator]
    app = create_app(settings_for(f"sqlite:///{db}", secret_key=key))
    with pytest.raises(SecretKeyMissing, match="MILEPOST_SECRET_KEY"), TestClient(app):
        pass
    assert not db.exists()  # refused before the database was touched


def test_the_server_refuses_a_malformed_secret_key(tmp_path: object) -> None:
    app = create_app(settings_for(f"sqlite:///{tmp_path}/x.db", secret_key="not-a-key"))
    with pytest.raises(SecretKeyInvalid), TestClient(app):
        pass


def test_openapi_is_served_at_docs(db_url: str) -> None:
    with start_server(db_url) as api:
        assert api.get("/docs", role="viewer").status_code == 200
        spec = api.get("/openapi.json", role="viewer").json()
        for path in ("/api/events/batch", "/api/commands/{event_id}/claim", "/api/execute"):
            assert path in spec["paths"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_nats_is_logged_and_the_server_works(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"nats://127.0.0.1:{_free_port()}"
    with start_server(f"sqlite:///{tmp_path}/n.db", nats_url=url) as api:
        assert isinstance(api.services.engine.publisher, notify.NullPublisher)
        xid = api.execute(HELLO)
        assert api.claim_one()["execution_id"] == xid
    assert any("not reachable" in r.getMessage() for r in caplog.records)


def test_issued_commands_are_announced_on_nats(tmp_path: object) -> None:
    require_nats()
    import nats

    received: list[dict[str, str]] = []
    loop = asyncio.new_event_loop()

    async def subscribe() -> object:
        client = await nats.connect(NATS_URL)

        async def on_message(msg: object) -> None:
            received.append(json.loads(msg.data))  # type: ignore[attr-defined]

        await client.subscribe(notify.subject("default"), cb=on_message)
        await client.flush()
        return client

    client = loop.run_until_complete(subscribe())
    try:
        with start_server(f"sqlite:///{tmp_path}/n.db", nats_url=NATS_URL) as api:
            publisher = api.services.engine.publisher
            assert isinstance(publisher, notify.NatsPublisher)
            xid = api.execute(HELLO)
            [row] = api.store.open_commands(int(xid))

            def arrived() -> bool:
                loop.run_until_complete(asyncio.sleep(0.02))
                return {"command_id": str(row.command_id), "execution_id": xid} in received

            wait_for(arrived, "the notice of the issued command")
            assert publisher.published >= 1 and publisher.failed == 0
    finally:
        loop.run_until_complete(client.close())  # type: ignore[attr-defined]
        loop.close()


def test_fastapis_telemetry_is_off_unless_opentelemetry_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (
        "OTEL_PYTHON_TRACER_PROVIDER",
        "OTEL_PYTHON_METER_PROVIDER",
        "OTEL_PYTHON_LOGGER_PROVIDER",
        "FASTAPI_OTEL_AUTO_CONFIGURE",
    ):
        monkeypatch.delenv(name, raising=False)
    assert app_module.telemetry() == {"tracing": False, "metrics": False, "logs": False}
    monkeypatch.setenv("FASTAPI_OTEL_AUTO_CONFIGURE", "true")
    assert app_module.telemetry() == {}  # FastAPI's defaults: on
    monkeypatch.delenv("FASTAPI_OTEL_AUTO_CONFIGURE")
    monkeypatch.setenv("OTEL_PYTHON_TRACER_PROVIDER", "sdk_tracer_provider")
    assert app_module.telemetry() == {}


def test_the_server_refuses_an_approval_webhook_without_a_secret(tmp_path: object) -> None:
    db = tmp_path / "w.db"  # type: ignore[operator]
    app = create_app(settings_for(f"sqlite:///{db}", approval_webhook_url="http://127.0.0.1:9/h"))
    with (
        pytest.raises(WebhookSecretMissing, match="MILEPOST_APPROVAL_WEBHOOK_SECRET"),
        TestClient(app),
    ):
        pass
    assert not db.exists()  # refused before the database was touched


def test_the_server_s_approval_webhook_listens_to_its_engine_until_it_stops(
    tmp_path: object,
) -> None:
    with start_server(
        f"sqlite:///{tmp_path}/w.db",
        approval_webhook_url="http://127.0.0.1:9/h",
        approval_webhook_secret="k",
    ) as api:
        notifier = api.services.webhook
        assert isinstance(notifier, WebhookNotifier)
        assert notifier in api.services.engine.listeners
        assert notifier.webhook.url == "http://127.0.0.1:9/h"
    # stopped with the server: what comes after is dropped, not queued for a dead thread
    notifier.notify([new_event(1, 2, APPROVAL_GRANTED, 0.0, payload={"approval_id": 1})])
    assert notifier.dropped == 1
