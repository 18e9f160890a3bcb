"""Wire shapes of the operator's reads: a run described step by step, a page of its
events chosen by step and type (`engine.describe`, `engine.event_query`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from milepost.api.checks import IdOut, TimeOut
from milepost.api.schemas import EventOut, RunProgress


class DescribeOut(RunProgress):
    """`steps`: `{name: {status, runs, result, started_at, ended_at, duration_s, worker,
    input, error?, attempts_total, attempts: [{command_id, run, index, attempt, status,
    worker, started_at, ended_at, duration_s, error, output, idempotency_key,
    child_execution_id}]}}`. A result too large for the log's row is
    `{reference: {uri, size}}`: `GET /api/executions/{id}/results/{event_id}` reads it.
    `child_execution_id`: the run a `playbook` step's attempt started, when known. A
    compensation step that ran (DSL 10.5) is among them with `compensates`: the steps whose
    runs it undid."""

    execution_id: IdOut
    path: str
    version: int | None
    status: str
    started_by: str | None = Field(description="Who started the run (an identity).")
    parent_execution_id: IdOut | None
    started_at: TimeOut | None
    ended_at: TimeOut | None
    duration_s: float | None = Field(description="Seconds from start to end; null while it runs.")


class EventPageOut(BaseModel):
    events: list[EventOut]
    next: int | None = Field(
        description="`after` for the next page; null when this one is the last."
    )
    last_seq: int = Field(description="The last seq read, matched or not: follow after it.")
    status: str = Field(
        description=(
            "The execution's status, read before its events: terminal with `next` null, the "
            "log was read to its end."
        )
    )
