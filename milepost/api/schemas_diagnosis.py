"""The wire shape of a run's diagnosis (`GET /api/executions/{id}/diagnosis`,
`core.diagnosis`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from milepost.api.checks import IdOut
from milepost.core import diagnosis


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
