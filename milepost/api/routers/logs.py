"""`GET /api/executions/{id}/logs`: what the run's attempts printed (`core.logs`), in
order, from a cursor, so `milepost logs --follow` resumes where it stopped."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from milepost.api import checks, errors
from milepost.api.auth import ReadAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH
from milepost.api.routers.executions import ExecutionId, existing
from milepost.api.schemas_logs import LogEntryOut, LogsOut
from milepost.ids import MAX_ID

router = APIRouter(prefix="/api/executions", tags=["executions"])


@router.get("/{execution_id}/logs", responses=errors.responses(*AUTH, 404, 422))
def execution_logs(
    execution_id: ExecutionId,
    engine: EngineDep,
    _: ReadAuth,
    step: Annotated[
        str | None,
        Query(max_length=200, pattern=checks.NO_NUL_PATTERN, description="Only this step's."),
    ] = None,
    after: Annotated[
        int, Query(ge=0, le=MAX_ID, description="The cursor of the last entry read.")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> LogsOut:
    # the status first: entries read after a terminal status are all there will be
    row = existing(engine, execution_id)
    rows = engine.logs(row.execution_id, step=step, after=after, limit=limit)
    entries = [
        LogEntryOut(
            cursor=r.log_id,
            step=r.step,
            command_id=str(r.command_id),
            attempt=r.attempt,
            stream=r.stream,
            text=r.text,
            cut=r.cut,
            created_at=checks.iso(r.created_at),
        )
        for r in rows
    ]
    return LogsOut(
        execution_id=str(row.execution_id),
        status=row.status,
        entries=entries,
        next=rows[-1].log_id if rows else after,
    )
