"""The operator's reads of one run: `GET /api/executions/{id}/describe` (each step's
attempts, workers, times, input and failure output) and `GET /api/executions/{id}/events`
(its log by step and type, paged, or the last few)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from milepost.api import checks, errors, schemas_reads, views
from milepost.api.auth import ReadAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH
from milepost.api.routers.executions import ExecutionId, parse_execution_id
from milepost.engine import describe, event_query

router = APIRouter(prefix="/api/executions", tags=["executions"])


@router.get("/{execution_id}/describe", responses=errors.responses(*AUTH, 404, 422))
def describe_execution(
    execution_id: ExecutionId, engine: EngineDep, _: ReadAuth
) -> schemas_reads.DescribeOut:
    data: dict[str, Any] = describe.describe(engine, parse_execution_id(execution_id))
    return schemas_reads.DescribeOut(**data)


@router.get("/{execution_id}/events", responses=errors.responses(*AUTH, 404, 422))
def execution_events(
    execution_id: ExecutionId,
    engine: EngineDep,
    _: ReadAuth,
    step: Annotated[
        str | None,
        Query(
            max_length=200, pattern=checks.NO_NUL_PATTERN, description="Only this step's events."
        ),
    ] = None,
    type: Annotated[
        str | None,
        Query(
            max_length=500,
            pattern=checks.NO_NUL_PATTERN,
            description=(
                "Event types, comma-separated; a name without a dot is a family: `command` is "
                "`command.*`."
            ),
        ),
    ] = None,
    after: Annotated[
        int, Query(ge=0, le=checks.MAX_OFFSET, description="Only events with seq > this.")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    tail: Annotated[
        int | None,
        Query(ge=0, le=10_000, description=("Only the last `tail` events that match (no paging).")),
    ] = None,
) -> schemas_reads.EventPageOut:
    query = event_query.EventQuery(step, event_query.types_of([type or ""]))
    page = event_query.page(
        engine, parse_execution_id(execution_id), query, after=after, limit=limit, tail=tail
    )
    return schemas_reads.EventPageOut(
        events=[views.event_out(e) for e in page.events],
        next=page.next_after,
        last_seq=page.last_seq,
        status=page.status,
    )
