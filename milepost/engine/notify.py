"""Worker wake-ups on NATS JetStream: a hint that work is queued, never the truth.

When commands are issued the server publishes `{"command_id", "execution_id"}` on
`milepost.commands.<pool>` (stream `MILEPOST_COMMANDS`, created if missing); the commands
one call issued in a pool go in one message, `{"commands": [{...}, ...]}`. Workers also
poll the claim route, so a lost notice only delays work: every failure here is logged
(once until the next success) and otherwise ignored, and a publish does not wait for
JetStream's acknowledgement (the stream still records it). `notify` never blocks the
caller; it hands the publish to the event loop the publisher was connected on.

A cancel is announced too, on `milepost.cancels` (`{"execution_ids": [...]}`, plain NATS:
outside the stream, nothing to replay): a worker running an attempt of one of those runs
heartbeats at once, and stops the attempt when the heartbeat says the run is cancelled
(`CancelNotices`). Also a hint: the heartbeat stays the truth, and the fallback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from milepost.core import events as ev
from milepost.records import record

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient

    from milepost.engine.orchestrator import Outcome

log = logging.getLogger(__name__)

STREAM = "MILEPOST_COMMANDS"
SUBJECT_PREFIX = "milepost.commands"
CANCELS = "milepost.cancels"
"""Where a run's cancel is announced to the workers (not a pool's: any may run it)."""
DEFAULT_POOL = "default"
STREAM_MAX_AGE = 3600.0
"""Seconds a notice is kept: an old notice is useless (polling found the work long ago)."""


def subject(pool: str = DEFAULT_POOL) -> str:
    return f"{SUBJECT_PREFIX}.{pool}"


@record
class Notice:
    """Command `command_id` of `execution_id` is queued in `pool`."""

    command_id: int
    execution_id: int
    pool: str = DEFAULT_POOL

    def fields(self) -> dict[str, str]:
        return {"command_id": str(self.command_id), "execution_id": str(self.execution_id)}

    def body(self) -> bytes:
        return json.dumps(self.fields()).encode()


def messages(notices: Sequence[Notice]) -> list[tuple[str, bytes, int]]:
    """(subject, body, notices in it): one message per pool, a lone notice as it is,
    several as `{"commands": [...]}`."""
    by_pool: dict[str, list[Notice]] = {}
    for notice in notices:
        by_pool.setdefault(notice.pool, []).append(notice)
    return [
        (
            subject(pool),
            group[0].body()
            if len(group) == 1
            else json.dumps({"commands": [n.fields() for n in group]}).encode(),
            len(group),
        )
        for pool, group in by_pool.items()
    ]


def cancel_message(execution_ids: Sequence[int]) -> tuple[str, bytes, int]:
    return CANCELS, json.dumps({"execution_ids": [str(x) for x in execution_ids]}).encode(), 0


class Publisher(Protocol):
    def notify(self, notices: Sequence[Notice]) -> None:
        """Publish wake-ups without blocking; failures are logged, never raised."""
        ...

    def notify_cancelled(self, execution_ids: Sequence[int]) -> None:
        """Announce these runs' cancels, as `notify` publishes (never blocks, never raises)."""
        ...

    async def close(self) -> None: ...


class NullPublisher:
    """No NATS configured (or reachable): workers find work by polling."""

    def notify(self, notices: Sequence[Notice]) -> None:
        return None

    def notify_cancelled(self, execution_ids: Sequence[int]) -> None:
        return None

    async def close(self) -> None:
        return None


class NatsPublisher:
    """Publishes notices on JetStream from any thread, on the loop it was connected on."""

    def __init__(self, client: NatsClient, loop: asyncio.AbstractEventLoop) -> None:
        self._client = client
        self._loop = loop
        self._tasks: set[asyncio.Task[None]] = set()
        self._failing = False
        self._lock = threading.Lock()
        self.published = 0
        """Notices acknowledged by JetStream (for tests and metrics)."""
        self.failed = 0

    @classmethod
    async def connect(cls, url: str, *, timeout: float = 2.0) -> NatsPublisher:
        """Connect and make sure the stream exists; raises when NATS cannot be reached."""
        # nats-py loads here, for a server configured with NATS: not in every process that
        # imports the engine (the CLI, a server without it)
        import nats
        from nats.js.api import StreamConfig
        from nats.js.errors import NotFoundError

        # one attempt per server at start-up (an absent NATS must not delay the server)...
        client = await asyncio.wait_for(
            nats.connect(
                url,
                connect_timeout=max(1, int(timeout)),
                max_reconnect_attempts=1,
                reconnect_time_wait=1,
                error_cb=_quiet_error,
                name="milepost-server",
            ),
            timeout * 2,
        )
        # ...and, once connected, reconnect for as long as it takes after a drop
        client.options["max_reconnect_attempts"] = -1
        try:
            js = client.jetstream(timeout=timeout)
            try:
                await js.stream_info(STREAM)
            except NotFoundError:
                await js.add_stream(
                    StreamConfig(
                        name=STREAM, subjects=[f"{SUBJECT_PREFIX}.>"], max_age=STREAM_MAX_AGE
                    )
                )
        except BaseException:
            await client.close()
            raise
        return cls(client, asyncio.get_running_loop())

    def notify(self, notices: Sequence[Notice]) -> None:
        if notices:
            self._hand_over(messages(notices))

    def notify_cancelled(self, execution_ids: Sequence[int]) -> None:
        if execution_ids:
            self._hand_over([cancel_message(execution_ids)])

    def _hand_over(self, batch: list[tuple[str, bytes, int]]) -> None:
        if self._loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._spawn(batch)
        else:
            self._loop.call_soon_threadsafe(self._spawn, batch)

    def _spawn(self, batch: list[tuple[str, bytes, int]]) -> None:
        task = self._loop.create_task(self._publish(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, batch: list[tuple[str, bytes, int]]) -> None:
        for subject_, body, count in batch:
            try:
                # a plain publish: the stream records it, and a hint needs no acknowledgement
                # (a JetStream publish waits for one per message: most of a busy server's
                # time in notices)
                await self._client.publish(subject_, body)
            except Exception as exc:  # a hint that did not arrive: polling covers it
                self.failed += 1
                with self._lock:
                    first, self._failing = not self._failing, True
                if first:
                    log.warning(
                        "cannot publish wake-ups on NATS (%s); workers fall back to polling",
                        exc,
                        extra={"action": "nats_publish_failed"},
                    )
                continue
            self.published += count
            with self._lock:
                recovered, self._failing = self._failing, False
            if recovered:
                log.info("publishing wake-ups on NATS again", extra={"action": "nats_recovered"})

    async def close(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.close()


async def connect(url: str | None, *, timeout: float = 2.0) -> Publisher:
    """A publisher for `url`, or a `NullPublisher` (logged once) when unset or unreachable."""
    if not url:
        return NullPublisher()
    try:
        return await NatsPublisher.connect(url, timeout=timeout)
    except Exception as exc:
        log.warning(
            "NATS at %s is not reachable (%s: %s); workers will find work by polling",
            url,
            type(exc).__name__,
            exc,
            extra={"action": "nats_unavailable"},
        )
        return NullPublisher()


async def _quiet_error(exc: Any) -> None:
    # nats-py prints a traceback per reconnect attempt by default; one line is enough
    log.debug("nats: %s", exc)


class CancelNotices:
    """A listener of the engine service: every cancel request it committed (a caller's, a
    child's with its parent, one posted as an event) announced to the workers."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher

    def __call__(self, outcome: Outcome) -> None:
        cancelled = [
            e.execution_id for e in outcome.events if e.event_type == ev.EXECUTION_CANCEL_REQUESTED
        ]
        if cancelled:
            self.publisher.notify_cancelled(cancelled)
