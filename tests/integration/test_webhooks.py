"""Approval webhooks against a real local HTTP server: the body, its signature, retries
with back-off, a receiver that fails or hangs, and the settings that turn them on."""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.engine import webhooks
from milepost.engine.orchestrator import Outcome
from milepost.engine.webhooks import Webhook, WebhookNotifier
from milepost.settings import Settings
from tests.receiver import Receiver, serve
from tests.shared import wait_for

SECRET = "s3cret"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serve() as state:
        state.url += "/hooks/milepost"
        yield state


def notifier_for(receiver: Receiver, **options: Any) -> WebhookNotifier:
    options = {"backoff": 0.05, "timeout": 2.0, **options}
    return WebhookNotifier(Webhook(url=receiver.url, secret=SECRET, **options)).start()


def requested(event_id: int = 7001, execution_id: int = 42) -> ev.Event:
    return ev.new_event(
        event_id,
        execution_id,
        ev.APPROVAL_REQUESTED,
        1_764_600_000.25,
        step="refund",
        payload={
            "approval_id": event_id,
            "run": 1,
            "quorum": 2,
            "approvers": ["role:finance", "user:alice", "user:bob"],
            "risk": "high",
            "digest": "ab" * 32,
            "expires_at": None,
        },
    )


def decided(event_id: int, approval_id: int = 7001, identity: str = "user:alice") -> ev.Event:
    return ev.new_event(
        event_id,
        42,
        ev.APPROVAL_DECIDED,
        1_764_600_100.0,
        step="refund",
        status="INFO",
        payload={
            "approval_id": approval_id,
            "identity": identity,
            "roles": ["finance"],
            "decision": "approve",
            "reason": None,
        },
    )


def test_an_approval_event_arrives_as_signed_json_with_its_id(receiver: Receiver) -> None:
    notifier = notifier_for(receiver)
    try:
        notifier.notify([requested()])
        [got] = wait_for(lambda: receiver.received, "the delivery")
    finally:
        notifier.close()
    assert got.json == {
        "type": "approval.requested",
        "event_id": "7001",
        "execution_id": "42",
        "step": "refund",
        "created_at": "2025-12-01T14:40:00.250+00:00",
        "payload": {
            "approval_id": "7001",
            "run": 1,
            "quorum": 2,
            "approvers": ["role:finance", "user:alice", "user:bob"],
            "risk": "high",
            "digest": "ab" * 32,
            "expires_at": None,
        },
    }
    # what a receiver computes: the HMAC of the raw bytes it got, with the shared secret
    expected = "sha256=" + hmac.new(SECRET.encode(), got.body, hashlib.sha256).hexdigest()
    assert got.headers["x-milepost-signature"] == expected
    assert webhooks.verify(SECRET, got.body, got.headers["x-milepost-signature"])
    assert not webhooks.verify("another secret", got.body, got.headers["x-milepost-signature"])
    assert not webhooks.verify(SECRET, got.body + b" ", got.headers["x-milepost-signature"])
    assert got.headers["x-milepost-event-id"] == "7001"
    assert got.headers["x-milepost-event-type"] == "approval.requested"
    assert got.headers["content-type"] == "application/json"
    assert notifier.delivered == 1 and notifier.dropped == 0


def test_only_approval_events_are_sent_and_in_the_order_committed(receiver: Receiver) -> None:
    other = ev.new_event(7000, 42, ev.STEP_ENTER, 1_764_600_000.0, step="refund")
    types = [ev.APPROVAL_GRANTED, ev.APPROVAL_DENIED, ev.APPROVAL_EXPIRED, ev.APPROVAL_INVALIDATED]
    closing = [
        ev.new_event(7010 + i, 42, t, 1_764_600_200.0, step="refund", payload={"approval_id": 7001})
        for i, t in enumerate(types)
    ]
    notifier = notifier_for(receiver)
    try:
        # the listener's way in: one engine call's outcome
        notifier(Outcome(events=[other, requested(), decided(7002), *closing]))
        wait_for(lambda: len(receiver.received) == 6, "six deliveries")
    finally:
        notifier.close()
    assert [r.json["type"] for r in receiver.received] == [
        "approval.requested",
        "approval.decided",
        *types,
    ]
    assert [r.headers["x-milepost-event-id"] for r in receiver.received] == [
        "7001",
        "7002",
        "7010",
        "7011",
        "7012",
        "7013",
    ]


def test_a_refused_delivery_is_retried_with_back_off_until_it_is_taken(receiver: Receiver) -> None:
    receiver.statuses = [500, 503, 500]
    notifier = notifier_for(receiver, backoff=0.1)
    started = time.monotonic()
    try:
        notifier.notify([requested()])
        wait_for(lambda: notifier.delivered == 1, "the fourth try taken")
    finally:
        notifier.close()
    took = time.monotonic() - started
    assert len(receiver.received) == 4
    # the same bytes, signature and id every time: the receiver dedupes by the id
    assert len({(r.body, r.headers["x-milepost-signature"]) for r in receiver.received}) == 1
    assert {r.headers["x-milepost-event-id"] for r in receiver.received} == {"7001"}
    assert took >= 0.1 + 0.2 + 0.4  # back-off doubles: 0.1, 0.2, 0.4 s between the tries


def test_a_delivery_refused_every_time_is_dropped_after_its_tries_and_logged(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.statuses = [500] * 3  # every try of the first event
    notifier = notifier_for(receiver, tries=3)
    try:
        with caplog.at_level(logging.WARNING, logger="milepost.engine.webhooks"):
            notifier.notify([requested(), decided(7002)])
            wait_for(lambda: notifier.delivered == 1, "the second event, after the first dropped")
    finally:
        notifier.close()
    assert notifier.dropped == 1
    # three tries of the first, then the next event goes (a dropped one holds up no other)
    assert [r.headers["x-milepost-event-id"] for r in receiver.received] == ["7001"] * 3 + ["7002"]
    dropped = [r for r in caplog.records if getattr(r, "action", "") == "webhook_dropped"]
    assert [r.event_id for r in dropped] == [7001]  # type: ignore[attr-defined]
    assert "HTTP 500" in dropped[0].getMessage()


def test_a_receiver_that_hangs_times_out_and_gets_the_event_on_a_later_try(
    receiver: Receiver,
) -> None:
    receiver.statuses = ["hang"]
    notifier = notifier_for(receiver, timeout=0.3)
    try:
        notifier.notify([requested()])
        wait_for(lambda: notifier.delivered == 1, "the try after the timeout")
    finally:
        notifier.close()
    assert len(receiver.received) == 2


def test_notify_never_waits_for_the_receiver_a_full_queue_drops(receiver: Receiver) -> None:
    receiver.statuses = ["hang"]
    notifier = notifier_for(receiver, queue_size=2, timeout=5.0)
    try:
        notifier.notify([requested()])
        wait_for(lambda: receiver.received, "the first delivery hanging")
        started = time.monotonic()
        notifier.notify([decided(7100 + i) for i in range(5)])
        assert time.monotonic() - started < 0.5  # the engine call never waits on the webhook
        assert notifier.dropped == 3  # two fit behind the hanging one
        receiver.release.set()
        wait_for(lambda: notifier.delivered == 3, "the hanging one and the two queued")
    finally:
        notifier.close()
    assert [r.headers["x-milepost-event-id"] for r in receiver.received] == ["7001", "7100", "7101"]


def test_close_delivers_what_is_queued_within_its_grace(receiver: Receiver) -> None:
    notifier = notifier_for(receiver)
    notifier.notify([requested(), decided(7002), decided(7003, identity="user:bob")])
    notifier.close(grace=5.0)
    assert [r.headers["x-milepost-event-id"] for r in receiver.received] == ["7001", "7002", "7003"]
    notifier.notify([decided(7004)])  # closed: dropped, not queued for nobody
    assert notifier.dropped == 1


def test_close_gives_up_on_a_receiver_that_is_down_after_its_grace(receiver: Receiver) -> None:
    receiver.statuses = [500] * 100
    notifier = notifier_for(receiver, backoff=5.0)
    notifier.notify([requested(), decided(7002)])
    wait_for(lambda: receiver.received, "the first try")
    started = time.monotonic()
    notifier.close(grace=0.3)
    assert time.monotonic() - started < 2.0  # the 5 s back-off does not hold the exit
    assert notifier.delivered == 0 and notifier.dropped == 2


def test_settings_name_the_webhook_and_a_url_needs_its_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Webhook.from_settings(Settings()) is None
    monkeypatch.setenv("MILEPOST_APPROVAL_WEBHOOK_URL", "https://hooks.example/milepost")
    with pytest.raises(webhooks.WebhookSecretMissing) as missing:
        Webhook.from_settings(Settings())
    assert missing.value.code == "approval_webhook_secret_missing"
    assert "MILEPOST_APPROVAL_WEBHOOK_SECRET" in str(missing.value)
    monkeypatch.setenv("MILEPOST_APPROVAL_WEBHOOK_SECRET", "k")
    hook = Webhook.from_settings(Settings())
    assert hook is not None and (hook.url, hook.secret) == ("https://hooks.example/milepost", "k")
    monkeypatch.setenv("MILEPOST_APPROVAL_WEBHOOK_URL", "ftp://hooks.example")
    with pytest.raises(webhooks.InvalidWebhookUrl) as bad:
        Webhook.from_settings(Settings())
    assert bad.value.code == "invalid_approval_webhook_url"
