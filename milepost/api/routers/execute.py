"""`POST /api/execute`: start a run of a catalog entry."""

from __future__ import annotations

from fastapi import APIRouter, Response

from milepost.api import errors, schemas, views
from milepost.api.auth import OperateAuth
from milepost.api.deps import RuntimeDep, StoreDep
from milepost.api.errors import AUTH, BODY
from milepost.api.routers.catalog import find

router = APIRouter(prefix="/api", tags=["executions"])


@router.post("/execute", response_model=schemas.ExecuteOut,
             responses=errors.responses(*AUTH, *BODY, 404))
def execute(body: schemas.ExecuteIn, store: StoreDep, runtime: RuntimeDep,
            _: OperateAuth) -> Response:  # fmt: skip
    entry = find(store, body)
    parent = body.parent_execution_id
    if parent is not None and store.get_execution(parent) is None:
        raise errors.not_found("execution_not_found", f"no parent execution {parent}",
                               execution_id=str(parent))  # fmt: skip
    playbook = runtime.playbook(entry.path, entry.version)
    xid, _outcome = runtime.start(playbook, entry.version, body.workload,
                                  parent_execution_id=parent)  # fmt: skip
    status = runtime.read(xid, lambda state, _pb: state.status, refresh=False)  # just written
    return views.as_json(schemas.ExecuteOut(execution_id=str(xid), status=status))
