"""Request and response models of an operator's actions on runs (`routers/actions`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field

from milepost.api.checks import NO_NUL, IdOut, StrictIn, check_json

Reason = Annotated[
    str | None, Field(default=None, max_length=2000, description="Why (recorded with the action).")
]


class RetryIn(StrictIn):
    reason: Reason = None


class SkipIn(StrictIn):
    result: Annotated[Any, AfterValidator(check_json)] = Field(
        description="The step's result, as if it had produced it (a loop step: the JSON "
        "array of its iterations' results)."
    )
    reason: Reason = None


class RestartIn(StrictIn):
    from_step: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        json_schema_extra=NO_NUL,
        description=(
            "The step to start from (default: the failed step, "
            "else the first that did not complete)."
        ),
    )


class IssuedOut(BaseModel):
    command_id: IdOut
    index: int
    attempt: int


class ActedOut(BaseModel):
    """What a retry or a skip did (its event names the operator)."""

    execution_id: IdOut
    step: str
    action: str
    actor: str = Field(description="Who acted: `user:<name>` or `token:<name>`.")
    event_id: IdOut
    status: str = Field(description="The run's status after the action.")
    step_status: str | None
    stopped: list[IdOut] = Field(description="The live attempts (command ids) it stopped.")
    issued: list[IssuedOut] = Field(description="The step's commands its decision issued.")


class StartedOut(BaseModel):
    """The new execution of a restart or a re-run."""

    execution_id: IdOut
    restarted_from: IdOut | None = None
    rerun_of: IdOut | None = None
    from_step: str | None = None
    reused: list[str] = Field(
        default_factory=list, description="The steps whose results the new run reuses."
    )


class LinksOut(BaseModel):
    execution_id: IdOut
    restarted_from: IdOut | None
    restarts: list[IdOut] = Field(description="The runs that restart this one, oldest first.")
