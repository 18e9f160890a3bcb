"""An operator's actions on runs (issue 12): retry or skip a step, restart a FAILED or
CANCELLED run from a step, re-run a run, and a run's restart links.

The caller acts as `principal.starter` (`user:<token user>`, else `token:<name>`), which
the action's event names; the engine checks the action against the run
(`engine.actions`). Its refusals: 404 (no such run or step), 409 (`execution_terminal`
naming `restart`, `execution_stopping`, `nothing_to_retry`, `step_not_active`,
`not_restartable`), 422 (`invalid_result`, a body that does not validate).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from milepost.api import checks, errors
from milepost.api import schemas_actions as schemas
from milepost.api.auth import ActAuth, ReadAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH, BODY
from milepost.api.routers.executions import ExecutionId, existing, parse_execution_id
from milepost.engine import actions
from milepost.engine.actions import Acted, Started

router = APIRouter(prefix="/api/executions", tags=["actions"])

StepName = Annotated[
    str,
    Path(
        min_length=1, max_length=200, pattern=checks.NO_NUL_PATTERN, description="The step's name."
    ),
]
ACTED = errors.responses(*AUTH, *BODY, 404, 409)


def _acted(acted: Acted) -> schemas.ActedOut:
    return schemas.ActedOut.model_validate(acted.wire())


def _started(started: Started) -> schemas.StartedOut:
    return schemas.StartedOut.model_validate(started.wire())


@router.post("/{execution_id}/steps/{step}/retry", responses=ACTED)
def retry(
    execution_id: ExecutionId,
    step: StepName,
    engine: EngineDep,
    principal: ActAuth,
    body: schemas.RetryIn | None = None,
) -> schemas.ActedOut:
    """A new attempt now of a step that failed and waits for its retry, or whose attempt
    is lost or stuck (stopped first); new idempotency key, same operation key."""
    reason = body.reason if body is not None else None
    return _acted(
        actions.retry(engine, parse_execution_id(execution_id), step, principal.starter, reason)
    )


@router.post("/{execution_id}/steps/{step}/skip", responses=ACTED)
def skip(
    execution_id: ExecutionId,
    step: StepName,
    body: schemas.SkipIn,
    engine: EngineDep,
    principal: ActAuth,
) -> schemas.ActedOut:
    """The step completes with the result given (its live attempts stopped); the run goes
    on from it as if the step had produced it."""
    return _acted(
        actions.skip(
            engine,
            parse_execution_id(execution_id),
            step,
            body.result,
            principal.starter,
            body.reason,
        )
    )


@router.post("/{execution_id}/restart", responses=ACTED)
def restart(
    execution_id: ExecutionId,
    engine: EngineDep,
    principal: ActAuth,
    body: schemas.RestartIn | None = None,
) -> schemas.StartedOut:
    """A new execution of a FAILED or CANCELLED run, from a step: the results of the steps
    it completed before that step are reused, not run again."""
    from_step = body.from_step if body is not None else None
    return _started(
        actions.restart(engine, parse_execution_id(execution_id), from_step, principal.starter)
    )


@router.post("/{execution_id}/rerun", responses=errors.responses(*AUTH, 404, 422))
def rerun(execution_id: ExecutionId, engine: EngineDep, principal: ActAuth) -> schemas.StartedOut:
    """A new execution with the same playbook version and inputs."""
    return _started(actions.rerun(engine, parse_execution_id(execution_id), principal.starter))


@router.get("/{execution_id}/restarts", responses=errors.responses(*AUTH, 404, 422))
def restarts(execution_id: ExecutionId, engine: EngineDep, _: ReadAuth) -> schemas.LinksOut:
    """The run this one restarts, and the runs that restart it."""
    row = existing(engine, execution_id)
    return schemas.LinksOut(**actions.links(engine, row.execution_id))
