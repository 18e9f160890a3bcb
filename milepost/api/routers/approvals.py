"""Approvals (DSL 10.3): the list, one approval with its votes, and a decision.

A decision is cast as the caller's identity (`user:<token user>`, with the token's role
and approver roles); the engine checks it against the run (`Lifecycle.decide_approval`):
who may decide, self-approval, a closed approval, a second vote. Its refusals are answered
by the error table (`api.errors`): 403, 404, 409.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from milepost import ids
from milepost.api import checks, errors, schemas, views
from milepost.api.auth import ApproveAuth, ReadAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH, BODY, ApiError
from milepost.core.approval_state import Voter

router = APIRouter(prefix="/api/approvals", tags=["approvals"])

ApprovalId = Annotated[
    str,
    Path(
        description="Approval id (digits): the id of its `approval.requested` event.",
        json_schema_extra={"pattern": checks.ID_PATTERN},
    ),
]
QueryId = Annotated[str | None, Query(max_length=20, pattern=checks.ID_PATTERN)]


def _id(value: str, *loc: str) -> int:
    try:
        return ids.parse_id(value)
    except ValueError as exc:
        raise errors.invalid([{"loc": list(loc), "msg": str(exc)}]) from None


@router.get("", responses=errors.responses(*AUTH, 422))
def list_approvals(
    engine: EngineDep,
    _: ReadAuth,
    status: Annotated[schemas.ApprovalStatus | None, Query()] = None,
    execution_id: QueryId = None,
    approver: Annotated[
        str | None,
        Query(
            max_length=200,
            pattern=checks.NO_NUL_PATTERN,
            description="An exact `approvers` entry, e.g. `role:finance` or `user:alice`.",
        ),
    ] = None,
    risk: Annotated[schemas.Risk | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: Annotated[
        str | None,
        Query(
            max_length=20,
            pattern=checks.ID_PATTERN,
            description=("The `next` of the previous page: approvals with a greater id."),
        ),
    ] = None,
    decided: Annotated[
        bool | None,
        Query(
            description=(
                "true: only decided ones (every status but `pending`: the history); false: only "
                "pending ones."
            )
        ),
    ] = None,
) -> Response:
    rows = engine.approvals(
        status=status,
        risk=risk,
        approver=approver,
        limit=limit + 1,
        decided=decided,
        execution_id=None if execution_id is None else _id(execution_id, "query", "execution_id"),
        after=None if after is None else _id(after, "query", "after"),
    )
    page = rows[:limit]
    more = len(rows) > limit
    return views.as_json(
        schemas.ApprovalList(
            items=[views.approval_item(r) for r in page],
            limit=limit,
            next=str(page[-1].approval_id) if more else None,
        )
    )


@router.get(
    "/{approval_id}",
    response_model=schemas.ApprovalOut,
    responses=errors.responses(*AUTH, 404, 422),
)
def get_approval(approval_id: ApprovalId, engine: EngineDep, _: ReadAuth) -> Response:
    row = engine.approval(_id(approval_id, "path", "approval_id"))  # ApprovalNotFound: 404
    return views.as_json(views.approval_out(row))


@router.post(
    "/{approval_id}/decision",
    response_model=schemas.ApprovalOut,
    responses=errors.responses(*AUTH, *BODY, 404, 409),
)
def decide_approval(
    approval_id: ApprovalId, body: schemas.DecisionIn, engine: EngineDep, principal: ApproveAuth
) -> Response:
    """Approve or deny as the token's user; the approval as the vote leaves it (granted
    when it reached the quorum, denied by a deny)."""
    aid = _id(approval_id, "path", "approval_id")
    engine.approval(aid)  # ApprovalNotFound: 404, whoever asks
    if principal.identity is None:
        raise ApiError(
            403,
            "no_user",
            "this token names no user, so it cannot decide an "
            "approval: create one with `milepost token create --user NAME`",
            role=principal.role,
        )
    voter = Voter(identity=principal.identity, roles=principal.roles)
    row = engine.decide_approval(aid, voter, body.decision, body.reason)
    return views.as_json(views.approval_out(row))
