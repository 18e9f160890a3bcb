"""`POST /api/execute`: start a run of a catalog entry."""

from __future__ import annotations

from fastapi import APIRouter, Response

from milepost.api import errors, schemas, views
from milepost.api.child_access import ExecuteAuth, check_start, parent_claim
from milepost.api.deps import RuntimeDep, StoreDep
from milepost.api.errors import AUTH, BODY
from milepost.api.routers.catalog import find

router = APIRouter(prefix="/api", tags=["executions"])


@router.post("/execute", response_model=schemas.ExecuteOut,
             responses=errors.responses(*AUTH, *BODY, 404))
def execute(body: schemas.ExecuteIn, store: StoreDep, runtime: RuntimeDep,
            principal: ExecuteAuth) -> Response:  # fmt: skip
    # the proof first: a worker learns nothing about the catalog without one
    command = parent_claim(store, runtime.clock(), principal, "start executions",
                           parent_execution_id=body.parent_execution_id,
                           command_id=body.parent_command_id, epoch=body.parent_epoch)  # fmt: skip
    if command is not None:
        check_start(runtime, principal, "start executions", command, _requested_path(body))
    entry = find(store, body)
    parent = body.parent_execution_id if command is None else command.execution_id
    if parent is not None and store.get_execution(parent) is None:
        raise errors.execution_not_found(parent, "parent execution")
    playbook = runtime.playbook(entry.path, entry.version)
    xid, _outcome = runtime.start(playbook, entry.version, body.workload,
                                  parent_execution_id=parent,
                                  parent_command_id=None if command is None else command.command_id)  # fmt: skip
    status = runtime.read(xid, lambda state, _pb: state.status, refresh=False)  # just written
    return views.as_json(schemas.ExecuteOut(execution_id=str(xid), status=status))


def _requested_path(body: schemas.ExecuteIn) -> str | None:
    """The catalog path the body names; None when its `catalog_id` is malformed (`find`
    answers that with a 422)."""
    try:
        return body.key()[0]
    except ValueError:
        return None
