"""`create_app(settings)`: the FastAPI server of docs/server-contract.md.

The lifespan refuses to start without `MILEPOST_SECRET_KEY`, opens and migrates the
store, builds the engine service (`engine.factory`; shared with other servers on PostgreSQL),
the vault, the NATS publisher (optional) and drives the engine's clock: the runs' timers
at their time and the reconciler's tick every `reconcile_interval` seconds.
Routes are sync functions: FastAPI runs them in its thread pool, so the synchronous
store never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable

from fastapi import Depends, FastAPI
from fastapi.telemetry import TelemetryConfig
from opentelemetry import trace
from starlette.concurrency import run_in_threadpool

from milepost import telemetry as spans
from milepost.api import checks, edge, errors
from milepost.api.deps import Services
from milepost.api.metrics import EngineMeters, Metrics
from milepost.api.routers import (
    actions,
    approvals,
    catalog,
    channel,
    commands,
    credentials,
    diagnosis,
    docs,
    events,
    execute,
    executions,
    graph,
    health,
    logs,
    metrics,
    reads,
    results,
    runs_stream,
    stream,
    ui,
    usage,
    workers,
)
from milepost.credentials import SecretKeyMissing, Vault
from milepost.engine import notify, webhooks, worker_pools
from milepost.engine import workers as registry
from milepost.engine.factory import Lease, build_engine
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.machine import renew_forever
from milepost.settings import Settings
from milepost.store import factory, port
from milepost.store.sqlite import SQLiteStore

log = logging.getLogger(__name__)

# runs_stream before executions: its /api/executions/stream is no /{execution_id}
ROUTERS = (
    health,
    metrics,
    catalog,
    execute,
    runs_stream,
    executions,
    events,
    channel,
    commands,
    credentials,
    docs,
    workers,
    approvals,
    usage,
    diagnosis,
    logs,
    actions,
    reads,
    results,
    stream,
    graph,
    ui,
)


def create_app(
    settings: Settings | None = None, *, clock: Callable[[], float] = time.time
) -> FastAPI:
    """The app; nothing is opened until its lifespan starts (uvicorn or TestClient)."""
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = await run_in_threadpool(_open, settings, clock)
        try:
            services.engine.publisher = await notify.connect(settings.nats_url)
            services.reconciler.publisher = services.engine.publisher
            # workers stop a cancelled run's attempts when told, not at their next heartbeat
            services.engine.listeners.append(notify.CancelNotices(services.engine.publisher))
            app.state.services = services
            task = None
            if settings.reconcile_interval > 0:
                task = asyncio.create_task(_reconcile_forever(services), name="milepost-clock")
            renewer = (
                None
                if services.machine_ids is None
                else asyncio.create_task(
                    renew_forever(services.machine_ids), name="milepost-machine-id"
                )
            )
            try:
                yield
            finally:
                for background in (task, renewer):
                    if background is not None:
                        background.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await background
                await services.engine.publisher.close()
                if services.webhook is not None:  # what is queued gets a few seconds to leave
                    await run_in_threadpool(services.webhook.close)
        finally:
            if services.machine_ids is not None:
                await run_in_threadpool(services.machine_ids.release)
            await run_in_threadpool(services.store.close)

    # the documentation routes are the `docs` router's: behind a token, assets from a package
    app = FastAPI(
        title="milepost",
        version="0.1.0",
        lifespan=lifespan,
        description="Durable workflow engine for NoETL playbooks (docs/server-contract.md).",
        telemetry=telemetry(),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(edge.known_query)],
    )
    app.state.settings = settings
    checks.configure(settings)
    app.add_middleware(edge.Edge, max_body_bytes=settings.max_body_bytes)
    errors.install(app)
    for module in ROUTERS:
        app.include_router(module.router)
    return app


_OTEL_PROVIDER_VARIABLES = (
    "OTEL_PYTHON_TRACER_PROVIDER",
    "OTEL_PYTHON_METER_PROVIDER",
    "OTEL_PYTHON_LOGGER_PROVIDER",
)


def telemetry() -> TelemetryConfig:
    """FastAPI's own OpenTelemetry: as FastAPI sets it when this process has a provider as
    the app is made (set in code, by `OTEL_PYTHON_*_PROVIDER`, or by
    `FASTAPI_OTEL_AUTO_CONFIGURE=true`), off when it has none. Left on without one, FastAPI
    asks on every request whether one has appeared: three environment reads per request,
    6% of the server's CPU in W3."""
    if (
        any(os.environ.get(name) for name in _OTEL_PROVIDER_VARIABLES)
        or os.environ.get("FASTAPI_OTEL_AUTO_CONFIGURE", "").lower() == "true"
        or not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    ):
        return {}
    return {"tracing": False, "metrics": False, "logs": False}


def _open(settings: Settings, clock: Callable[[], float]) -> Services:
    if not (settings.secret_key or "").strip():
        raise SecretKeyMissing()  # refuse before touching the database
    webhook = webhooks.Webhook.from_settings(settings)  # a URL without a secret: refused
    spans.from_settings(settings, service="milepost-server")  # before the engine exists
    # `MILEPOST_DATABASE_URLS` (shards) if set, else `database_url`, else the default file;
    # migrated as it opens
    store = factory.open_store(settings=settings)
    engine: Lifecycle | None = None
    notifier: webhooks.WebhookNotifier | None = None
    try:
        vault = Vault(store, settings.secret_key or "", clock=clock)
        shared = not isinstance(store, SQLiteStore)  # other servers may share PostgreSQL
        app_metrics = Metrics()
        notifier = None if webhook is None else webhooks.WebhookNotifier(webhook).start()
        # a leased machine id: no other server or `milepost run` on this database makes
        # the same event ids; told which (MILEPOST_MACHINE_ID), that one, so that nobody
        # else leases it and no server takes a client's id on it
        engine = build_engine(
            store,
            settings,
            clock=clock,
            lease=Lease("server"),
            shared=shared,
            meters=EngineMeters(app_metrics),
            listeners=() if notifier is None else (notifier,),
        )
        running = engine
        app_metrics.watch_queue(
            lambda: sum(1 for row in store.open_commands() if row.status == port.COMMAND_QUEUED)
        )
        app_metrics.watch_approvals(store.pending_approvals_by_risk)
        app_metrics.watch_missing_workers(lambda: worker_pools.counts(running.missing_workers()))
        app_metrics.watch_workers(lambda: registry.counts(store, clock()))
    except BaseException:
        if notifier is not None:
            notifier.close(grace=0)
        if engine is not None and engine.machine_ids is not None:  # else taken for its ttl
            engine.machine_ids.release()
        store.close()
        raise
    log.info("milepost server ready", extra={"action": "server_ready", "shared": shared})
    return Services(
        settings=settings,
        store=store,
        engine=engine,
        vault=vault,
        metrics=app_metrics,
        shared=shared,
        machine_ids=engine.machine_ids,
        webhook=notifier,
    )


async def _reconcile_forever(services: Services) -> None:
    """The server's clock (`engine.clock`): after a recovery of every running run (its
    timers lived in the memory of the server that stopped), each run's timer fired at its
    time (`Lifecycle.wake`) and the reconciler's tick every `reconcile_interval`, in the
    thread pool (the store's calls block). What either raises is logged, and the next turn
    tries again: a crash here would stop every lease expiry."""
    engine = services.engine
    try:
        await run_in_threadpool(engine.recover)
    except Exception:
        log.exception("reconciler: recovery failed", extra={"action": "recover_failed"})
    engine.timers.every("reconcile_tick", services.settings.reconcile_interval, engine.tick)
    await engine.timers.run(offload=run_in_threadpool)
