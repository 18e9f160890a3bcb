"""`POST /api/execute`: start a run of a catalog entry."""

from __future__ import annotations

from fastapi import APIRouter, Response

from milepost.api import errors, schemas, views
from milepost.api.child_access import ExecuteAuth, check_start, parent_claim
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH, BODY
from milepost.api.routers.catalog import find

router = APIRouter(prefix="/api", tags=["executions"])


@router.post(
    "/execute", response_model=schemas.ExecuteOut, responses=errors.responses(*AUTH, *BODY, 404)
)
def execute(body: schemas.ExecuteIn, engine: EngineDep, principal: ExecuteAuth) -> Response:
    # the proof first: a worker learns nothing about the catalog without one
    command = parent_claim(
        engine,
        principal,
        "start executions",
        parent_execution_id=body.parent_execution_id,
        command_id=body.parent_command_id,
        epoch=body.parent_epoch,
    )
    if command is not None:
        check_start(engine, principal, "start executions", command, _requested_path(body))
    entry = find(engine, body)
    parent = body.parent_execution_id if command is None else command.execution_id
    if parent is not None:
        engine.execution(parent, "parent execution")  # ExecutionNotFound: 404
    playbook = engine.playbook(entry.path, entry.version)
    xid, _outcome = engine.start(
        playbook,
        entry.version,
        body.workload,
        parent_execution_id=parent,
        parent_command_id=None if command is None else command.command_id,
        # a child inherits its parent's (the engine reads it there)
        started_by=None if parent is not None else principal.starter,
    )
    status = engine.read(xid, lambda state, _pb: state.status, refresh=False)  # just written
    return views.as_json(schemas.ExecuteOut(execution_id=str(xid), status=status))


def _requested_path(body: schemas.ExecuteIn) -> str | None:
    """The catalog path the body names; None when its `catalog_id` is malformed (`find`
    answers that with a 422)."""
    try:
        return body.key()[0]
    except ValueError:
        return None
