"""`GET /api/executions/{id}/results/{result_id}`: one result of a run that the result store
keeps by reference (`milepost://results/<id>/<result_id>`), read when a person asks for
it (the web UI's step panel) rather than with every describe."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from milepost import ids
from milepost.api import checks, errors
from milepost.api.auth import ReadAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH
from milepost.api.routers.executions import ExecutionId, existing
from milepost.sanitize import mask

router = APIRouter(prefix="/api/executions", tags=["executions"])

ResultId = Annotated[
    str,
    Path(
        description="The entry's id: the last part of its "
        "`milepost://results/<execution_id>/<id>` uri.",
        json_schema_extra={"pattern": checks.ID_PATTERN},
    ),
]


@router.get("/{execution_id}/results/{result_id}", responses=errors.responses(*AUTH, 404, 422))
def execution_result(
    execution_id: ExecutionId, result_id: ResultId, engine: EngineDep, _: ReadAuth
) -> Any:
    """The entry as JSON; 404 `result_not_found` for an id this run has no entry under
    (another run's entry included)."""
    row = existing(engine, execution_id)
    try:
        rid = ids.parse_id(result_id)
    except ValueError as exc:
        raise errors.invalid([{"loc": ["path", "result_id"], "msg": str(exc)}]) from None
    value = engine.run_result(row.execution_id, rid)
    if value is None:
        raise errors.not_found(
            "result_not_found",
            f"run {row.execution_id} has no result {result_id}",
            execution_id=str(row.execution_id),
            result_id=result_id,
        )
    # a value from outside the worker's redaction (a client's reference) is masked as the
    # engine masks what such clients send
    return mask(value)
