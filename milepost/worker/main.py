"""The `milepost worker` process: a `Worker` over HTTP and the worker channel, with NATS
wake-ups, warm python processes and signal handling, configured through `Settings`."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

from milepost import telemetry
from milepost.client import AsyncMilepostClient, MilepostClient
from milepost.errors import MilepostError
from milepost.settings import Settings
from milepost.tools.runtime import ToolRuntime
from milepost.worker import jobs
from milepost.worker.channel import ChannelClient
from milepost.worker.children import ServerChildren
from milepost.worker.loop import Worker
from milepost.worker.nats_wakeup import NatsWakeup
from milepost.worker.remote_credentials import RemoteCredentials

log = logging.getLogger(__name__)

CREDENTIAL_FETCH_TIMEOUT = 5.0
"""A credential not foreseen is fetched blocking the loop: keep that short."""


async def run_worker(
    settings: Settings | None = None,
    *,
    handle_signals: bool = False,
    channel: Callable[[AsyncMilepostClient], ChannelClient] = ChannelClient,
) -> None:
    """Run a worker against `settings.server_url` until stopped (SIGTERM/SIGINT with
    `handle_signals`: the first stops gracefully, the second ends the grace period).

    The settings used: server_url and token (else the client's own defaults), concurrency,
    pool, worker_id, nats_url (None: poll only), lease_seconds, grace_seconds,
    python_workers, python_idle_seconds, machine_id. `channel` carries the reports (`milepost verify` wraps it
    to note what the server said it stored).
    """
    settings = settings or Settings()
    telemetry.from_settings(settings, service="milepost-worker")
    server, token = settings.server_url, settings.token
    async with AsyncMilepostClient(server, token) as client:
        reports = channel(client)  # reports over the worker channel, the rest over HTTP
        blocking = MilepostClient(server, token, timeout=CREDENTIAL_FETCH_TIMEOUT)
        credentials = RemoteCredentials(client.credential, blocking.credential, time.time)
        tools = ToolRuntime(
            python_workers=settings.python_workers,
            python_max=settings.concurrency,  # as many as attempts run at once
            python_idle_seconds=settings.python_idle_seconds,
            credentials=credentials,
            children=ServerChildren(client),
            nats_url=settings.nats_url,
        )
        try:
            worker = Worker(
                reports,
                tools,
                settings=settings,
                credentials=credentials,
                announce=tools.python.describe(),
            )
            wakeup = (
                NatsWakeup(
                    settings.nats_url,
                    worker.pool,
                    worker.notify,
                    name=worker.worker_id,
                    on_cancel=lambda n: jobs.cancel_announced(worker.jobs.values(), n),
                )
                if settings.nats_url
                else None
            )
            if wakeup is not None:
                wakeup.start()
            remove = _install_signals(worker) if handle_signals else None
            # a long-lived worker starts its python processes now, not on its first command
            # (a spawn costs most of a second); claims go on meanwhile
            warming = asyncio.create_task(_warm(tools), name="warm-python")
            try:
                await worker.run()
            finally:
                warming.cancel()
                if remove is not None:
                    remove()
                if wakeup is not None:
                    await wakeup.close()
        finally:
            await reports.aclose()
            await tools.aclose()
            blocking.close()


async def _warm(tools: ToolRuntime) -> None:
    try:
        await tools.python.start()
    except Exception as exc:  # noqa: BLE001 - the first python command will try again
        log.warning(
            "could not start the python processes ahead of time: %s",
            exc,
            extra={"action": "python_warm_failed"},
        )


def _install_signals(worker: Worker) -> Callable[[], None]:
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if worker.stopping:
            log.warning("%s again: ending the grace period", name, extra={"action": "worker_kill"})
            worker.kill()
        else:
            log.info("%s: shutting down", name, extra={"action": "worker_signal"})
            worker.stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)

    def remove() -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)

    return remove


def worker_settings(settings: Settings | None = None, **overrides: Any) -> Settings:
    """`settings` (default: from the environment) with the `overrides` that are not None
    (the command line's options over the environment's `MILEPOST_*`)."""
    settings = settings or Settings()
    return settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})


def worker_main(
    server: str | None = None,
    *,
    token: str | None = None,
    concurrency: int | None = None,
    pool: str | None = None,
    worker_id: str | None = None,
    nats_url: str | None = None,
    lease_seconds: float | None = None,
    grace_seconds: float | None = None,
    python_workers: int | None = None,
    log_level: str | None = None,
    channel: Callable[[AsyncMilepostClient], ChannelClient] = ChannelClient,
) -> int:
    """The blocking entry of `milepost worker`; returns the exit code (0 after a clean stop,
    2 when the server refused the token, `worker.token`, or a machine id for good).

    Every argument left None comes from `Settings` (`MILEPOST_SERVER_URL`, `MILEPOST_TOKEN`,
    `MILEPOST_CONCURRENCY` (16, as for `milepost run`), `MILEPOST_POOL` (else
    `MILEPOST_NATS_POOL`, else `default`), `MILEPOST_WORKER_ID` (`host:pid`),
    `MILEPOST_NATS_URL` (none: poll only), `MILEPOST_LEASE_SECONDS` (30),
    `MILEPOST_GRACE_SECONDS` (30), `MILEPOST_PYTHON_WORKERS` (python processes kept
    warm, 2; more start on demand up to the concurrency), `MILEPOST_PYTHON_IDLE_SECONDS`
    (60), `MILEPOST_LOG_LEVEL` (INFO)). Event ids use `MILEPOST_MACHINE_ID`, else a machine id leased from the server.
    """
    settings = worker_settings(
        server_url=server,
        token=token,
        concurrency=concurrency,
        pool=pool,
        worker_id=worker_id,
        nats_url=nats_url,
        lease_seconds=lease_seconds,
        grace_seconds=grace_seconds,
        python_workers=python_workers,
        log_level=log_level,
    )
    level = settings.log_level.upper()
    if not logging.getLogger().handlers:
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    else:
        logging.getLogger().setLevel(level)
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        try:
            runner.run(run_worker(settings, handle_signals=True, channel=channel))
        except MilepostError as exc:  # a refused token or machine id: retrying would not pass
            log.error("worker stopped: %s", exc.message, extra={"action": "worker_refused"})
            return 2
    return 0


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when it is installed (it is a dependency): a worker's time goes to the event
    loop and HTTP; the standard loop otherwise."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
