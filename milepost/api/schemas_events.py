"""The wire shapes of an event a worker or a client posts (`POST /api/events[/batch]`).

Milepost's own form and what NoETL workers send (DSL 12.3) are one model: the NoETL names
(`name`, `node_name`, `payload`, `result_kind`/`result_uri`/`event_ids`) are aliases or
fields beside milepost's, and `milepost.api.noetl_events` maps them to what the engine
takes. An event of a batch may leave its `execution_id` to the batch (`BatchEventIn`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AliasChoices, ConfigDict, Field, model_validator

from milepost.api.checks import NO_NUL, Checked, FreeJson, StrictIn, WireId, WireTime, check_json
from milepost.api.schemas_logs import LogIn

AnyJson = Annotated[Any, AfterValidator(check_json)]
"""Any JSON value (a NoETL worker's payload need not be an object), checked like FreeJson."""

ResultKind = Literal["ref", "refs", "data", "inline"]
"""NoETL's `result_kind`: `ref` (one result elsewhere, `result_uri`), `refs` (results in
other events, `event_ids`), or the result itself (`data`/`inline`: nothing to refer to)."""


class Envelope(StrictIn):
    """`result`: `{status, context}` or `{status, reference}`, nothing else."""

    status: str | None = None
    context: FreeJson | None = None
    reference: FreeJson | None = None

    @model_validator(mode="after")
    def _one_of(self) -> Envelope:
        if self.context is not None and self.reference is not None:
            raise ValueError("result carries `context` or `reference`, not both")
        return self


class EventFields(Checked):
    """Every field of a posted event but `execution_id`."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    event_id: WireId | None = None
    event_type: str = Field(
        min_length=1,
        max_length=100,
        json_schema_extra=NO_NUL,
        validation_alias=AliasChoices("event_type", "name"),
    )
    step: str | None = Field(
        default=None,
        max_length=200,
        json_schema_extra=NO_NUL,
        validation_alias=AliasChoices("step", "node_name"),
    )
    status: str | None = Field(default=None, max_length=40, json_schema_extra=NO_NUL)
    result: Envelope | None = None
    context: AnyJson = Field(
        default=None,
        description="The event's payload: an object (a "
        "non-object one is kept in `meta.payload`, the result stored "
        "without `context`).",
        validation_alias=AliasChoices("context", "payload"),
    )
    meta: FreeJson | None = None
    worker_id: str | None = Field(default=None, max_length=200, json_schema_extra=NO_NUL)
    parent_event_id: WireId | None = None
    created_at: WireTime | None = None
    logs: list[LogIn] | None = Field(
        default=None,
        description="What a report's attempt printed (kept beside the log, never in the event).",
    )
    result_kind: ResultKind | None = Field(
        default=None,
        description="[NoETL] the result is elsewhere: `ref` names it by "
        "`result_uri`, `refs` by `event_ids`; stored as the step's result, a reference "
        "object `{kind, uri | event_ids}`.",
    )
    result_uri: str | None = Field(
        default=None, min_length=1, max_length=2000, json_schema_extra=NO_NUL
    )
    event_ids: list[WireId] | None = Field(default=None, min_length=1, max_length=10_000)


class EventIn(EventFields):
    execution_id: WireId


class BatchEventIn(EventFields):
    """An event of a batch: without `execution_id`, the batch's."""

    execution_id: WireId | None = None
