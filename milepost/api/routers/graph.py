"""`GET /api/executions/{id}/graph`: the run's steps and arcs with each step's status
(the web UI's run page); `GET /api/whoami`: the caller's role and what it may do."""

from __future__ import annotations

from fastapi import APIRouter

from milepost.api import auth, errors
from milepost.api.auth import ReadAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH
from milepost.api.routers.executions import ExecutionId, existing
from milepost.api.schemas_graph import GraphOut, WhoamiOut
from milepost.engine.run_graph import run_graph

router = APIRouter(prefix="/api", tags=["executions"])


@router.get("/executions/{execution_id}/graph", responses=errors.responses(*AUTH, 404, 422))
def execution_graph(execution_id: ExecutionId, engine: EngineDep, _: ReadAuth) -> GraphOut:
    """One node per step (a loop is one node with iteration counts) and one edge per arc."""
    row = existing(engine, execution_id)
    return GraphOut.model_validate(
        engine.read(row.execution_id, lambda s, pb: run_graph(s, pb, engine.waits_of(s, pb)))
    )


@router.get("/whoami", responses=errors.responses(*AUTH))
def whoami(principal: ReadAuth) -> WhoamiOut:
    role = principal.role
    return WhoamiOut(
        role=role,
        name=principal.name,
        user=principal.user,
        may={
            "cancel": role in auth.OPERATE,
            "execute": role in auth.OPERATE,
            "act": role in auth.OPERATE,
            "approve": role in auth.APPROVE,
        },
    )
