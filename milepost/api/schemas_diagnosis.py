"""The wire shape of a run's diagnosis (`GET /api/executions/{id}/diagnosis`,
`core.diagnosis`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from milepost.api.checks import IdOut


class FindingOut(BaseModel):
    kind: str = Field(description=(
        "A stable code: completed, failed, cancelled, failing, no_driver, no_live_worker, "
        "lease_expired, awaiting_approval, cancel_pending, compensating, retry_pending, "
        "join_waiting, loop_waiting, claimed, queued, stall_near, budget_near, idle."))
    step: str | None = Field(description="The step it concerns, if one.")
    message: str = Field(description="One line for people.")
    fields: dict[str, Any] = Field(description=(
        "The facts of the message: times as ISO-8601 UTC, ids as strings."))


class DiagnosisOut(BaseModel):
    execution_id: IdOut
    playbook: str
    status: str
    checked_at: str = Field(description="When the engine looked (ISO-8601 UTC).")
    findings: list[FindingOut] = Field(description="The most likely cause first.")
