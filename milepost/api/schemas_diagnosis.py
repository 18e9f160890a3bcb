"""The wire shape of a run's diagnosis (`GET /api/executions/{id}/diagnosis`,
`core.diagnosis`) and of what it waits on (`core.waiting`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from milepost.api.checks import IdOut, TimeOut
from milepost.core import diagnosis, waiting


class FindingOut(BaseModel):
    kind: str = Field(description=f"A stable code: {', '.join(diagnosis.ORDER)}.")
    step: str | None = Field(description="The step it concerns, if one.")
    message: str = Field(description="One line for people.")
    fields: dict[str, Any] = Field(
        description=("The facts of the message: times as ISO-8601 UTC, ids as strings.")
    )


class DiagnosisOut(BaseModel):
    execution_id: IdOut
    playbook: str
    status: str
    checked_at: str = Field(description="When the engine looked (ISO-8601 UTC).")
    findings: list[FindingOut] = Field(description="The most likely cause first.")


class WaitOut(BaseModel):
    """One thing a run waits on now (`core.waiting`): the same in the status, the describe,
    the runs list and the graph. Times are absolute: a reader says how far off they are."""

    kind: str = Field(description=f"A stable code: {', '.join(waiting.ORDER)}.")
    step: str | None = Field(None, description="The step it concerns (null: the whole run).")
    index: int | None = Field(None, description="The loop index; null for a step without loop.")
    due_at: TimeOut | None = Field(
        None,
        description=(
            "When it ends (ISO-8601 UTC): a retry's due time, an approval's expiry, a claim's "
            "lease end, a cancel's grace; null when the engine knows no end."
        ),
    )
    attempt: int | None = Field(
        None,
        description=(
            "The attempt it leads to (a `policy_retry`'s: the task's execution, inside the "
            "same attempt)."
        ),
    )
    attempts: int | None = Field(None, description="Of how many at most, when known.")
    error: dict[str, Any] | None = Field(None, description="The error a retry follows.")
    task: str | None = Field(None, description="A policy retry's task (a pipeline's).")
    worker: str | None = Field(None, description="The worker holding the command, if one.")
    pool: str | None = None
    approval_id: IdOut | None = None
    command_id: IdOut | None = None
    undoes: str | None = Field(
        None, description="A compensation's retry: the step whose run it undoes."
    )
    count: int = Field(
        1, description="Waits of this step and kind (a loop's iterations); this one is due first."
    )
