"""A run's diagnosis: why it is not moving, or why it ended (`milepost doctor --server`)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from milepost.api import errors, views
from milepost.api.auth import ReadAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH
from milepost.api.routers.executions import ExecutionId, parse_execution_id
from milepost.api.schemas_diagnosis import DiagnosisOut

router = APIRouter(prefix="/api/executions", tags=["executions"])


@router.get(
    "/{execution_id}/diagnosis",
    response_model=DiagnosisOut,
    responses=errors.responses(*AUTH, 404, 422),
)
def get_diagnosis(execution_id: ExecutionId, engine: EngineDep, _: ReadAuth) -> Response:
    """Findings about the run, the most likely cause first: which step waits for which
    approval and who may decide, which command is claimed by which worker and when its
    lease ends, which pool has no live worker, which loop waits for how many iterations,
    which retry timer is pending, which budget or stall limit is near; for an ended run,
    that it completed or the first error (step, tool, template or line of code)."""
    found = engine.diagnosis(parse_execution_id(execution_id))  # ExecutionNotFound: 404
    return views.as_json(DiagnosisOut.model_validate(found))
