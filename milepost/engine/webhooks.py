"""Approval webhooks: every approval event, once committed, POSTed to one URL, signed.

The notifier is a listener of the engine service (`Lifecycle.listeners`): it sees the
events each call committed (the listeners run after the commit, never inside it), keeps
the approval ones and puts them on a bounded queue. One background thread delivers them
in order with httpx, retrying a refused or failed delivery with exponential back-off,
then logs and drops it. Nothing here can block or fail a run: the engine call only
enqueues (a full queue drops the event, logged), and a receiver that is down or hangs
holds up only the deliveries behind it.

The body is `{type, event_id, execution_id, step, created_at, payload}` (ids as strings,
as on every wire of milepost; `created_at` ISO 8601 UTC). Headers: `X-Milepost-Signature:
sha256=<hex HMAC-SHA256 of the raw body with the secret>`, `X-Milepost-Event-Id` (a
delivery may be repeated: a retry after a reply that was lost; receivers dedupe by it) and
`X-Milepost-Event-Type`.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import queue
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import httpx

from milepost.core import events as ev
from milepost.errors import MilepostError
from milepost.settings import Settings

if TYPE_CHECKING:
    from milepost.engine.orchestrator import Outcome

log = logging.getLogger(__name__)

APPROVAL_EVENTS = ev.APPROVAL_EVENTS
"""The events a webhook is sent (every approval event: the request, the votes, the outcomes)."""

SIGNATURE_HEADER = "X-Milepost-Signature"
EVENT_ID_HEADER = "X-Milepost-Event-Id"
EVENT_TYPE_HEADER = "X-Milepost-Event-Type"


class WebhookSecretMissing(MilepostError):
    """An approval webhook URL needs a secret to sign its deliveries with."""

    code = "approval_webhook_secret_missing"


class InvalidWebhookUrl(MilepostError):
    """The approval webhook URL is not an http(s) URL."""

    code = "invalid_approval_webhook_url"


@dataclass(frozen=True, slots=True)
class Webhook:
    """Where approval events go, and how hard to try."""

    url: str
    secret: str
    """Signs every body (HMAC-SHA256): a receiver tells our deliveries from forgeries."""
    timeout: float = 10.0
    """Seconds one delivery may take (connect, send, reply) before it counts as failed."""
    tries: int = 8
    """Deliveries of one event before it is dropped (0.5 s doubling: about a minute)."""
    backoff: float = 0.5
    """Seconds before the second try; doubled for each next one, up to `max_backoff`."""
    max_backoff: float = 30.0
    queue_size: int = 1000
    """Events waiting at most; past it new ones are dropped (logged), never waited for."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Webhook | None:
        """The webhook of `MILEPOST_APPROVAL_WEBHOOK_URL` (None when unset); refuses a URL
        without `MILEPOST_APPROVAL_WEBHOOK_SECRET`: unsigned approvals could be forged."""
        url = (settings.approval_webhook_url or "").strip()
        if not url:
            return None
        secret = settings.approval_webhook_secret or ""
        if not secret.strip():
            raise WebhookSecretMissing(
                "MILEPOST_APPROVAL_WEBHOOK_URL is set but MILEPOST_APPROVAL_WEBHOOK_SECRET "
                "is not: approval webhooks are always signed",
                url=url,
            )
        if not url.startswith(("http://", "https://")):
            raise InvalidWebhookUrl(f"approval webhook URL {url!r} is not http(s)", url=url)
        return cls(url=url, secret=secret)


def body(event: ev.Event) -> bytes:
    """The JSON a webhook receives for `event` (the exact bytes that are signed)."""
    payload = dict(event.payload)
    if "approval_id" in payload and payload["approval_id"] is not None:
        payload["approval_id"] = str(payload["approval_id"])  # an id, a string on the wire
    document = {
        "type": event.event_type,
        "event_id": str(event.event_id),
        "execution_id": str(event.execution_id),
        "step": event.step,
        "created_at": datetime.fromtimestamp(event.created_at, UTC).isoformat(
            timespec="milliseconds"
        ),
        "payload": payload,
    }
    return json.dumps(document, separators=(",", ":"), default=str).encode()


def signature(secret: str, raw: bytes) -> str:
    """The `X-Milepost-Signature` value of a body: `sha256=<hex HMAC-SHA256>`."""
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def verify(secret: str, raw: bytes, header: str | None) -> bool:
    """Whether `header` signs `raw` with `secret` (what a receiver checks; constant time)."""
    return header is not None and hmac.compare_digest(signature(secret, raw), header)


@dataclass(frozen=True, slots=True)
class Delivery:
    event_id: int
    event_type: str
    raw: bytes


class WebhookNotifier:
    """Delivers approval events to one webhook from a background thread (`start`, `close`)."""

    def __init__(self, webhook: Webhook, *, client: httpx.Client | None = None) -> None:
        self.webhook = webhook
        self._client = client or httpx.Client(timeout=webhook.timeout)
        self._queue: queue.Queue[Delivery | None] = queue.Queue(maxsize=webhook.queue_size)
        self._stop = threading.Event()
        """Set once closing gave up waiting: back-offs end, what is left is dropped."""
        self._closing = False
        self._thread: threading.Thread | None = None
        self._counts = threading.Lock()  # the engine's threads drop, this one delivers
        self.delivered = 0
        self.dropped = 0

    def start(self) -> WebhookNotifier:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="milepost-webhook", daemon=True)
            self._thread.start()
        return self

    def __call__(self, outcome: Outcome) -> None:
        """The listener: the approval events of one engine call's outcome."""
        self.notify(outcome.events)

    def notify(self, events: Iterable[ev.Event]) -> None:
        """Queue the approval events among `events` (committed ones); never blocks."""
        for event in events:
            if event.event_type not in APPROVAL_EVENTS:
                continue
            if self._closing:
                self._drop(event.event_id, event.event_type, "the notifier is closed")
                continue
            try:
                self._queue.put_nowait(Delivery(event.event_id, event.event_type, body(event)))
            except queue.Full:
                self._drop(event.event_id, event.event_type, "the webhook queue is full")

    def close(self, grace: float = 5.0) -> None:
        """Deliver what is queued for up to `grace` seconds, then drop the rest (logged).
        A process about to exit gives its last events (a decision) a chance to leave."""
        self._closing = True
        deadline = time.monotonic() + grace
        if self._thread is not None:
            with contextlib.suppress(queue.Full):
                self._queue.put(None, timeout=max(0.0, deadline - time.monotonic()))
            self._thread.join(max(0.0, deadline - time.monotonic()))
            self._stop.set()
            self._thread.join(0.5)
        while True:  # never started, or gave up: what is left is dropped, and said so
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self._drop(item.event_id, item.event_type, "the notifier closed first")
        self._client.close()

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._deliver(item)
            except Exception:  # a bug here must not end the thread: later events still go
                log.exception(
                    "approval webhook: delivery raised",
                    extra={"action": "webhook_error", "event_id": item.event_id},
                )
                with self._counts:
                    self.dropped += 1

    def _deliver(self, item: Delivery) -> None:
        delay = self.webhook.backoff
        problem = ""
        for attempt in range(1, self.webhook.tries + 1):
            if self._stop.is_set():
                break
            problem = self._post(item)
            if not problem:
                with self._counts:
                    self.delivered += 1
                return
            log.warning(
                "approval webhook: try %d of %d failed: %s",
                attempt,
                self.webhook.tries,
                problem,
                extra={"action": "webhook_retry", "event_id": item.event_id, "attempt": attempt},
            )
            if attempt < self.webhook.tries and self._stop.wait(delay):
                break  # closing: no more waiting
            delay = min(delay * 2, self.webhook.max_backoff)
        self._drop(item.event_id, item.event_type, problem or "the notifier closed first")

    def _post(self, item: Delivery) -> str:
        """One try: "" when the receiver took it (2xx), else what went wrong."""
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "milepost",
            SIGNATURE_HEADER: signature(self.webhook.secret, item.raw),
            EVENT_ID_HEADER: str(item.event_id),
            EVENT_TYPE_HEADER: item.event_type,
        }
        try:
            response = self._client.post(self.webhook.url, content=item.raw, headers=headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if 200 <= response.status_code < 300:
            return ""
        return f"HTTP {response.status_code}"

    def _drop(self, event_id: int, event_type: str, why: str) -> None:
        with self._counts:
            self.dropped += 1
        log.error(
            "approval webhook: %s %s dropped: %s",
            event_type,
            event_id,
            why,
            extra={"action": "webhook_dropped", "event_id": event_id, "event_type": event_type},
        )
