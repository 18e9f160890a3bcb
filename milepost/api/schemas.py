"""Request and response models of the HTTP API (the wire shapes; core keeps dataclasses).

Ids are accepted as JSON strings or integers and returned as strings; times are returned
as ISO-8601 UTC strings.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)

MAX_ID = (1 << 63) - 1
ID_PATTERN = "^[0-9]+$"
"""An id as a string: ASCII digits (what `parse_id` reads and the API writes)."""
MAX_INT = MAX_ID
"""The largest integer the databases store (BIGINT): a bigger one was a driver error, a 500."""
NO_NUL = r"^[^\x00]*$"
"""The pattern of every string that is stored or queried as text: PostgreSQL text cannot
hold NUL, so a NUL was a driver error (500); refused at the edge on both databases."""
MAX_TIME = 253_402_300_799.0
"""9999-12-31T23:59:59Z, the last second ISO-8601 text (`iso`) can write."""


def parse_id(value: Any) -> int:
    """A snowflake from a JSON integer or a string of digits."""
    if isinstance(value, bool):
        raise ValueError("an id is an integer or a string of digits, not a boolean")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdigit():
        # ASCII only, as ID_PATTERN says: int() also reads "١٢" (Arabic-Indic) and " 12 "
        number = int(value)
    else:
        raise ValueError("an id is an integer or a string of digits")
    if not 0 < number <= MAX_ID:
        raise ValueError("an id is a positive 64-bit integer")
    return number


def parse_time(value: Any) -> float:
    """Seconds since the epoch from a number, a numeric string or an ISO-8601 string."""
    if isinstance(value, bool):
        raise ValueError("a time is ISO-8601 text or epoch seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = float(value)
        except ValueError:
            try:
                moment = datetime.fromisoformat(value.strip())
            except ValueError:
                raise ValueError("a time is ISO-8601 text or epoch seconds") from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            seconds = moment.timestamp()
    else:
        raise ValueError("a time is ISO-8601 text or epoch seconds")
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_TIME:
        raise ValueError("a time must be epoch seconds between 0 and 253402300799 "
                         "(9999-12-31T23:59:59Z)")
    return seconds


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


# the JSON Schema says what the validators take and what `views` writes (documentation only:
# output models are built from typed values, so nothing is checked twice on the hot paths)
WireId = Annotated[int, BeforeValidator(parse_id), WithJsonSchema({
    "anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_ID},
              {"type": "string", "pattern": ID_PATTERN}],
    "description": "A snowflake id: a JSON integer or a string of digits."})]  # fmt: skip
WireTime = Annotated[float, BeforeValidator(parse_time), WithJsonSchema({
    "anyOf": [{"type": "number", "minimum": 0, "maximum": MAX_TIME}, {"type": "string"}],
    "description": "Epoch seconds, or ISO-8601 text (UTC when it names no zone)."})]  # fmt: skip
IdOut = Annotated[str, WithJsonSchema({"type": "string", "pattern": ID_PATTERN})]
"""An id as the API returns it: a string of digits (JSON numbers lose precision past 2^53)."""
TimeOut = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
"""A time as the API returns it: ISO-8601 UTC, milliseconds (`iso`)."""


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# -- catalog ---------------------------------------------------------------------------------


class RegisterIn(_In):
    content: str = Field(min_length=1, description="The playbook YAML.")


class CatalogRef(_In):
    """A catalog entry by `path` (+ `version`, default the latest) or by `catalog_id`."""

    path: str | None = Field(default=None, pattern=NO_NUL)
    version: int | None = Field(default=None, ge=1, le=MAX_INT)
    catalog_id: str | None = Field(default=None, description='"<path>@<version>"',
                                   pattern=NO_NUL)

    @model_validator(mode="after")
    def _one_way(self) -> CatalogRef:
        if self.catalog_id is None and not self.path:
            raise ValueError("give `path` (and optionally `version`) or `catalog_id`")
        return self

    def key(self) -> tuple[str, int | None]:
        if self.catalog_id is not None:
            path, sep, version = self.catalog_id.rpartition("@")
            if not sep or not path or not version.isdigit():
                raise ValueError(f"catalog_id {self.catalog_id!r} is not '<path>@<version>'")
            return path, int(version)
        assert self.path is not None
        return self.path, self.version


class ListIn(_In):
    path: str | None = Field(default=None, pattern=NO_NUL)


class CatalogEntryOut(BaseModel):
    path: str
    version: int
    catalog_id: str
    created_at: TimeOut | None = None


class CatalogListOut(BaseModel):
    entries: list[CatalogEntryOut]


class CatalogResourceOut(CatalogEntryOut):
    content: str


# -- executions ------------------------------------------------------------------------------


class ExecuteIn(CatalogRef):
    workload: dict[str, Any] = Field(default_factory=dict,
                                     validation_alias=AliasChoices("workload", "payload"))  # fmt: skip
    parent_execution_id: WireId | None = None


class ExecuteOut(BaseModel):
    execution_id: IdOut
    status: str


class ExecutionItem(BaseModel):
    execution_id: IdOut
    path: str
    version: int | None
    status: str
    created_at: TimeOut | None
    updated_at: TimeOut | None
    parent_execution_id: IdOut | None


class ExecutionList(BaseModel):
    items: list[ExecutionItem]
    limit: int
    offset: int


class EventOut(BaseModel):
    event_id: IdOut
    execution_id: IdOut
    seq: int
    event_type: str
    step: str | None
    status: str | None
    result: dict[str, Any]
    meta: dict[str, Any]
    worker_id: str | None
    parent_event_id: IdOut | None
    created_at: TimeOut | None


class StatusOut(BaseModel):
    execution_id: IdOut
    status: str
    error: dict[str, Any] | None
    steps: dict[str, Any]


class ExecutionOut(ExecutionItem):
    error: dict[str, Any] | None
    steps: dict[str, Any]
    events: list[EventOut]
    events_next: int | None = Field(
        description="`events_after` for the next page, null when this page is the last.")


class CancelOut(BaseModel):
    execution_id: IdOut
    status: str


# -- events ----------------------------------------------------------------------------------


class Envelope(_In):
    """`result`: `{status, context}` or `{status, reference}`, nothing else."""

    status: str | None = None
    context: dict[str, Any] | None = None
    reference: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_of(self) -> Envelope:
        if self.context is not None and self.reference is not None:
            raise ValueError("result carries `context` or `reference`, not both")
        return self


class EventIn(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    event_id: WireId | None = None
    execution_id: WireId
    event_type: str = Field(min_length=1, max_length=100, pattern=NO_NUL,
                            validation_alias=AliasChoices("event_type", "name"))  # fmt: skip
    step: str | None = Field(default=None, max_length=200, pattern=NO_NUL)
    status: str | None = Field(default=None, max_length=40, pattern=NO_NUL)
    result: Envelope | None = None
    context: dict[str, Any] | None = Field(default=None,
                                           validation_alias=AliasChoices("context", "payload"))  # fmt: skip
    meta: dict[str, Any] | None = None
    worker_id: str | None = Field(default=None, max_length=200, pattern=NO_NUL)
    parent_event_id: WireId | None = None
    created_at: WireTime | None = None


# -- commands --------------------------------------------------------------------------------


class ClaimIn(_In):
    worker_id: str = Field(min_length=1, max_length=200, pattern=NO_NUL)
    lease_seconds: float | None = Field(default=None, gt=0, le=3600)


class ClaimNextIn(ClaimIn):
    pool: str | None = Field(default=None, max_length=100, pattern=NO_NUL)
    limit: int = Field(default=1, ge=1, le=100)


class HeartbeatIn(ClaimIn):
    epoch: int = Field(ge=0, le=MAX_INT)


class ReleaseIn(_In):
    worker_id: str = Field(min_length=1, max_length=200, pattern=NO_NUL)
    epoch: int = Field(ge=0, le=MAX_INT)


class LeaseOut(BaseModel):
    epoch: int
    expires_at: TimeOut | None


class PlaybookRef(BaseModel):
    path: str
    version: int | None


class CommandOut(BaseModel):
    command_id: IdOut
    event_id: IdOut
    execution_id: IdOut
    step: str
    run: int
    index: int
    attempt: int
    idempotency_key: str
    status: str
    playbook: PlaybookRef
    context: dict[str, Any]
    loop_steps: dict[str, dict[str, int]]
    args: dict[str, Any]
    lease: LeaseOut | None = None


# a batch of events comes after the commands: a report may claim the next ones


class EventBatchIn(_In):
    events: list[EventIn] = Field(min_length=1, max_length=10_000)
    claim: ClaimNextIn | None = Field(
        default=None, description="[milepost extension] claim the reporting worker's next "
        "commands in the same transaction; they come back in `commands`.")  # fmt: skip


class IngestOut(BaseModel):
    accepted: int
    stored: int
    event_ids: list[IdOut]
    stale: list[IdOut] = Field(default_factory=list,
                             description="[milepost extension] ids stored as stale reports.")  # fmt: skip
    commands: list[CommandOut] | None = Field(
        default=None, description="[milepost extension] the commands claimed for `claim` "
        "(left out without it).")  # fmt: skip


class ClaimNextOut(BaseModel):
    commands: list[CommandOut]


class HeartbeatOut(BaseModel):
    lease: LeaseOut
    cancelled: bool


class ReleaseOut(BaseModel):
    released: bool


# -- credentials -----------------------------------------------------------------------------


class CredentialIn(_In):
    name: str = Field(min_length=1, max_length=200, pattern=NO_NUL)
    type: str = Field(min_length=1, max_length=100, pattern=NO_NUL)
    data: dict[str, Any]


class CredentialOut(BaseModel):
    name: str
    type: str
    created_at: TimeOut | None = None
    updated_at: TimeOut | None = None
    data: dict[str, Any] | None = Field(
        default=None, description="Only with include_data=true, for the worker and admin roles.")


class CredentialList(BaseModel):
    items: list[CredentialOut]


class DeletedOut(BaseModel):
    deleted: bool


class HealthOut(BaseModel):
    status: str


# -- errors ----------------------------------------------------------------------------------
# What `milepost.api.errors` answers (docs/server-contract.md, Errors): documentation only,
# the handlers build the bodies as dicts.


class ErrorOut(BaseModel):
    """Every 4xx/5xx body: a stable `code`, a `message`, and fields that name the thing."""

    model_config = ConfigDict(extra="allow")

    code: str = Field(description="Stable, e.g. `execution_not_found`, `stale_epoch`.")
    message: str


class FieldError(BaseModel):
    loc: list[str | int] = Field(description='Where, e.g. ["body", "events", 0, "step"].')
    msg: str


class ValidationErrorOut(ErrorOut):
    """422: `validation_error` with `errors`, or `playbook_invalid` with `problems`."""

    errors: list[FieldError] | None = None
    problems: list[str] | None = None
