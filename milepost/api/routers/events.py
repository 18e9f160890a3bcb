"""`POST /api/events` and `/api/events/batch`: worker reports, in one transaction."""

from __future__ import annotations

import time

from fastapi import APIRouter, Response

from milepost.api import errors, ingest, noetl_events, schemas, views
from milepost.api.auth import EventAuth, Principal, authorize_events
from milepost.api.deps import EngineDep, MetricsDep, Services, ServicesDep
from milepost.api.errors import AUTH, BODY
from milepost.api.metrics import Metrics
from milepost.api.routers import commands
from milepost.core import events as ev
from milepost.engine.lifecycle import ClaimRequest, Lifecycle

router = APIRouter(prefix="/api/events", tags=["events"])


@router.post(
    "", response_model=schemas.IngestOut, responses=errors.responses(*AUTH, *BODY, 404, 409)
)
def post_event(
    body: schemas.EventIn, engine: EngineDep, metrics: MetricsDep, principal: EventAuth
) -> Response:
    return views.as_json(
        ingest_batch([body], engine, metrics, batch=False, principal=principal), exclude_none=True
    )


@router.post(
    "/batch", response_model=schemas.IngestOut, responses=errors.responses(*AUTH, *BODY, 404, 409)
)
def post_batch(body: schemas.EventBatchIn, services: ServicesDep, principal: EventAuth) -> Response:
    """The events in one transaction. With `claim` (a worker reporting its attempts), the
    worker's next commands are claimed in that transaction and come back in `commands`:
    one round trip per step instead of a report and a claim."""
    return views.as_json(report(body, services, principal), exclude_none=True)


def report(
    body: schemas.EventBatchIn, services: Services, principal: Principal
) -> schemas.IngestOut:
    """A batch and its `claim`: the body of this route and of the worker channel's messages
    (`principal`: who sent it, for `auth.EVENT_ROLES`). NoETL's batch form names its
    execution and worker once, at the top (`noetl_events.batch_items`)."""
    items = noetl_events.batch_items(body)
    if not items and body.execution_id is not None:
        # nothing to store, but an execution named: one that does not exist is still a 404
        services.engine.read(body.execution_id, lambda state, playbook: None)
    claim = None
    if body.claim is not None:
        lease_s = commands.lease_s(services.settings, body.claim.lease_seconds)
        claim = services.engine.claim_request(
            body.claim.worker_id, lease_s, body.claim.limit, body.claim.pool
        )
    return ingest_batch(
        items, services.engine, services.metrics, batch=True, principal=principal, claim=claim
    )


def ingest_batch(
    items: list[schemas.EventIn],
    engine: Lifecycle,
    metrics: Metrics,
    *,
    batch: bool,
    principal: Principal,
    claim: ClaimRequest | None = None,
) -> schemas.IngestOut:
    if not items and claim is None:  # an empty batch (NoETL's flush of nothing): no-op
        return schemas.IngestOut(accepted=0, stored=0, event_ids=[])
    started = time.perf_counter()
    try:
        authorize_events(principal, [item.event_type for item in items], batch)
        done = ingest.ingest(
            engine, items, batch, claim, actor=principal.starter, owner=principal.token
        )
    except ingest.REJECTIONS:
        for item in items:
            metrics.events_ingested.labels(_type_label(item.event_type), "rejected").inc()
        raise
    finally:
        metrics.ingest_seconds.observe(time.perf_counter() - started)
    for event in done.events:
        if event.event_id in done.ignored:
            outcome = "ignored"
        elif event.event_id in done.stale_ids:
            outcome = "stale"
        elif event.event_id in done.stored_ids:
            outcome = "stored"
        else:
            outcome = "duplicate"
        # a type the engine does not know is stored now (DSL 12.3): labels must stay few
        metrics.events_ingested.labels(_type_label(event.event_type), outcome).inc()
    return schemas.IngestOut(
        accepted=len(done.events),
        stored=len(done.stored_ids),
        event_ids=[str(e.event_id) for e in done.events],
        stale=[str(e.event_id) for e in done.events if e.event_id in done.stale_ids],
        ignored=[str(e.event_id) for e in done.events if e.event_id in done.ignored],
        ignored_reasons={str(k): why for k, why in done.ignored.items()} or None,
        stored_ids=[str(e.event_id) for e in done.events if e.event_id in done.stored_ids],
        duplicates=[str(e.event_id) for e in done.events if e.event_id in done.duplicate_ids],
        commands=None
        if claim is None
        else commands.hand_out(engine, done.claimed, fresh=done.written),
    )


def _type_label(name: str) -> str:
    """Known types by name; anything else as `unknown` (labels must stay few)."""
    etype = ev.canonical_type(name)
    return etype if etype in ev.EVENT_TYPES else "unknown"
