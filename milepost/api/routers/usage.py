"""`GET /api/usage`: usage summed per playbook, provider and model (DSL 10.6), a milepost
extension read from the store's totals (no run is folded)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from milepost.api import checks, errors, schemas, views
from milepost.api.auth import ReadAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH

router = APIRouter(prefix="/api/usage", tags=["usage"])


@router.get("", responses=errors.responses(*AUTH, 422))
def playbook_usage(
    engine: EngineDep,
    _: ReadAuth,
    path: Annotated[
        str | None,
        Query(
            max_length=500, pattern=checks.NO_NUL_PATTERN, description="Only this playbook path."
        ),
    ] = None,
) -> schemas.UsageList:
    return schemas.UsageList(items=[views.playbook_usage(r) for r in engine.playbook_usage(path)])
