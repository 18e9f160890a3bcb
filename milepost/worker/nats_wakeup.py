"""Wake-ups from NATS: the server announces issued commands on `milepost.commands.<pool>`.

A notice is a hint, never work: the worker still claims through the API, and keeps
polling with back-off when NATS is absent, unreachable or silent. The server publishes
into the JetStream stream `MILEPOST_COMMANDS`; a JetStream publish is an ordinary
message on its subject, so a plain subscription sees it live without a consumer to
create or clean up (missed notices need no replay: polling finds the commands).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from milepost.engine.notify import CANCELS

log = logging.getLogger(__name__)

SUBJECT_PREFIX = "milepost.commands"
RETRY_FIRST = 1.0
RETRY_MAX = 30.0
RECONNECT_WAIT = 2.0

Notice = dict[str, Any]


def subject(pool: str) -> str:
    return f"{SUBJECT_PREFIX}.{pool}"


def parse_notice(data: bytes) -> Notice:
    """The notice's JSON object, `{}` when it is not one (still a wake-up)."""
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class NatsWakeup:
    """Subscribes to the pool's subject and calls `on_notice` for each message.

    `start()` returns at once; the connection is made in a background task and retried
    while the server is unreachable (nats-py retries every `RECONNECT_WAIT` seconds, for
    the first connection too), so a worker started before NATS still gets wake-ups once
    it comes up.
    """

    def __init__(
        self,
        url: str,
        pool: str,
        on_notice: Callable[[Notice], None],
        *,
        name: str | None = None,
        on_cancel: Callable[[Notice], None] | None = None,
    ) -> None:
        self.url = url
        self.subject = subject(pool)
        self._on_notice = on_notice
        self._on_cancel = on_cancel
        """Called with each cancel announced on `milepost.cancels` (`engine.notify`)."""
        self._name = name
        self._nc: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        """Set once the subscription is live (tests wait on it)."""
        self.notices = 0
        self._warned = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._connect_loop(), name="nats-wakeup")

    async def _connect_loop(self) -> None:
        delay = RETRY_FIRST
        while True:
            try:
                await self._connect()
                return
            except Exception as exc:  # noqa: BLE001 - NATS is optional; keep polling
                log.warning(
                    "NATS unreachable at %s (%s); polling only, retrying in %.0fs",
                    self.url,
                    type(exc).__name__,
                    delay,
                    extra={"action": "nats_unreachable"},
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)

    async def _connect(self) -> None:
        nc = await nats.connect(
            self.url,
            name=self._name,
            connect_timeout=2,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=RECONNECT_WAIT,
            error_cb=self._on_error,
            disconnected_cb=self._on_disconnect,
            reconnected_cb=self._on_reconnect,
        )
        try:
            await nc.subscribe(self.subject, cb=self._on_message)
            if self._on_cancel is not None:
                await nc.subscribe(CANCELS, cb=self._on_cancelled)
            await nc.flush(timeout=5)
        except BaseException:
            with contextlib.suppress(Exception):
                await nc.close()
            raise
        self._nc = nc
        self.connected.set()
        log.info(
            "listening for notices on %s",
            self.subject,
            extra={"action": "nats_subscribed", "subject": self.subject},
        )

    async def _on_message(self, msg: Msg) -> None:
        self.notices += 1
        self._on_notice(parse_notice(msg.data))

    async def _on_cancelled(self, msg: Msg) -> None:
        if self._on_cancel is not None:
            self._on_cancel(parse_notice(msg.data))

    async def _on_error(self, exc: Exception) -> None:
        # nats-py retries the first connection too, forever: say once that we poll meanwhile
        if not self.connected.is_set() and not self._warned:
            self._warned = True
            log.warning(
                "NATS unreachable at %s (%s: %s); polling only until it answers",
                self.url,
                type(exc).__name__,
                exc,
                extra={"action": "nats_unreachable"},
            )
        else:
            log.debug("NATS error: %s", exc, extra={"action": "nats_error"})

    async def _on_disconnect(self) -> None:
        log.info("NATS disconnected; polling until it is back", extra={"action": "nats_down"})

    async def _on_reconnect(self) -> None:
        log.info("NATS reconnected", extra={"action": "nats_up"})

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        nc, self._nc = self._nc, None
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()
