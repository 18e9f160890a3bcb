"""Request and response models of the HTTP API (the wire shapes; core keeps dataclasses).

Ids are accepted as JSON strings or integers and returned as strings; times are returned
as ISO-8601 UTC strings.

Every value is checked here, at the edge, so that nothing the databases or the engine
cannot take back is stored: times within `TIME_RANGE`, free JSON (`FreeJson`) finite and
at most `max_json_depth` deep, and no NUL in any string of a request model (PostgreSQL
refuses it in text columns).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any, get_args

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict

from milepost import credentials
from milepost.core.ids import MAX_MACHINE
from milepost.settings import Settings

MAX_ID = (1 << 63) - 1
ID_PATTERN = "^[0-9]+$"
"""An id as a string: ASCII digits (what `parse_id` reads and the API writes)."""
MAX_OFFSET = MAX_ID
"""Largest offset (or `events_after`) a query takes: both databases count in 64 bits."""
TIME_RANGE = (946_684_800.0, 7_258_118_400.0)
"""Times accepted on the wire, epoch seconds: 2000-01-01 to 2200-01-01 UTC."""
NUL_MESSAGE = "must not contain NUL (\\x00)"
NO_NUL_PATTERN = r"^[^\x00]*$"
NO_NUL: JsonDict = {"pattern": NO_NUL_PATTERN}
"""What the document says of every string that is stored or queried as text (PostgreSQL
text cannot hold NUL); `_Checked` enforces it with its own message, so it is only shown."""


class _Limits:
    """The settings the validators read; `configure` sets them as an app is made."""

    max_json_depth = Settings.model_fields["max_json_depth"].default


def configure(settings: Settings) -> None:
    _Limits.max_json_depth = settings.max_json_depth


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
    low, high = TIME_RANGE
    if not (math.isfinite(seconds) and low <= seconds < high):
        hint = " (epoch milliseconds? divide by 1000)" if low <= seconds / 1000 < high else ""
        raise ValueError(f"a time is epoch seconds (or ISO-8601) between 2000-01-01 and "
                         f"2200-01-01 UTC, got {value!r}{hint}")  # fmt: skip
    return seconds


def iso(seconds: float | None) -> str | None:
    """ISO-8601 UTC; None for a time no datetime can hold (written before times were
    checked): one bad row must not make every read of its execution fail."""
    if seconds is None:
        return None
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, ValueError, OSError):
        return None


def check_json(value: Any) -> Any:
    """Free JSON as the API takes it: finite numbers (`NaN`/`Infinity` are no JSON and no
    response could carry them back), nested at most `max_json_depth` levels (the engine
    walks values recursively). Iterative: a value too deep must not overflow the check."""
    limit = _Limits.max_json_depth
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(f"numbers must be finite, got {item!r}")
        elif isinstance(item, dict | list):
            if depth > limit:
                raise ValueError(f"nested deeper than {limit} levels (MILEPOST_MAX_JSON_DEPTH)")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return value


def no_nul(value: Any) -> Any:
    if isinstance(value, str) and "\x00" in value:
        raise ValueError(NUL_MESSAGE)
    return value


# the JSON Schema says what the validators take and what `views` writes (documentation only:
# output models are built from typed values, so nothing is checked twice on the hot paths)
WireId = Annotated[int, BeforeValidator(parse_id), WithJsonSchema({
    "anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_ID},
              {"type": "string", "pattern": ID_PATTERN}],
    "description": "A snowflake id: a JSON integer or a string of digits."})]  # fmt: skip
WireTime = Annotated[float, BeforeValidator(parse_time), WithJsonSchema({
    "anyOf": [{"type": "number", "minimum": TIME_RANGE[0], "exclusiveMaximum": TIME_RANGE[1]},
              {"type": "string"}],
    "description": "Epoch seconds, or ISO-8601 text (UTC when it names no zone), from "
                   "2000-01-01 to 2200-01-01 UTC."})]  # fmt: skip
IdOut = Annotated[str, WithJsonSchema({"type": "string", "pattern": ID_PATTERN})]
"""An id as the API returns it: a string of digits (JSON numbers lose precision past 2^53)."""
TimeOut = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
"""A time as the API returns it: ISO-8601 UTC, milliseconds (`iso`)."""
FreeJson = Annotated[dict[str, Any], AfterValidator(check_json)]
"""A JSON object a client chooses freely (workload, meta, context, credential data)."""


def _takes_bool(annotation: Any) -> bool:
    """Whether a field's type admits a JSON boolean (`bool`, `Any`, or a union with one)."""
    if annotation is bool or annotation is Any:
        return True
    return any(_takes_bool(arg) for arg in get_args(annotation))


class _Checked(BaseModel):
    """Request models: no NUL in any string field (free JSON is stored as JSON text, where
    it is escaped), and no boolean where a number is meant (pydantic's lax mode reads
    `false` as 0: `{"epoch": false}` was epoch 0, `{"limit": true}` a limit of 1)."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None and not _takes_bool(
                cls.model_fields[info.field_name].annotation):  # fmt: skip
            raise ValueError("a boolean is not a valid value here")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        return no_nul(value)


class _In(_Checked):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# -- catalog ---------------------------------------------------------------------------------


class RegisterIn(_In):
    content: str = Field(min_length=1, description="The playbook YAML.")


class CatalogRef(_In):
    """A catalog entry by `path` (+ `version`, default the latest) or by `catalog_id`."""

    path: str | None = Field(default=None, json_schema_extra=NO_NUL)
    version: int | None = Field(default=None, ge=1, le=MAX_ID)
    catalog_id: str | None = Field(default=None, description='"<path>@<version>"',
                                   json_schema_extra=NO_NUL)

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
    path: str | None = Field(default=None, json_schema_extra=NO_NUL)


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
    workload: FreeJson = Field(default_factory=dict,
                               validation_alias=AliasChoices("workload", "payload"))  # fmt: skip
    parent_execution_id: WireId | None = None
    parent_command_id: WireId | None = Field(default=None, description=(
        "[milepost extension] The command that starts this child; with `parent_epoch`, the "
        "proof a worker token needs (the live claim of that command)."))
    parent_epoch: int | None = Field(default=None, ge=1, description=(
        "[milepost extension] The epoch of the claim of `parent_command_id`."))

    @model_validator(mode="after")
    def _proof_whole(self) -> ExecuteIn:
        if (self.parent_command_id is None) != (self.parent_epoch is None):
            raise ValueError("give `parent_command_id` and `parent_epoch` together")
        return self


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
    context: FreeJson | None = None
    reference: FreeJson | None = None

    @model_validator(mode="after")
    def _one_of(self) -> Envelope:
        if self.context is not None and self.reference is not None:
            raise ValueError("result carries `context` or `reference`, not both")
        return self


class EventIn(_Checked):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    event_id: WireId | None = None
    execution_id: WireId
    event_type: str = Field(min_length=1, max_length=100, json_schema_extra=NO_NUL,
                            validation_alias=AliasChoices("event_type", "name"))  # fmt: skip
    step: str | None = Field(default=None, max_length=200, json_schema_extra=NO_NUL)
    status: str | None = Field(default=None, max_length=40, json_schema_extra=NO_NUL)
    result: Envelope | None = None
    context: FreeJson | None = Field(default=None,
                                     validation_alias=AliasChoices("context", "payload"))  # fmt: skip
    meta: FreeJson | None = None
    worker_id: str | None = Field(default=None, max_length=200, json_schema_extra=NO_NUL)
    parent_event_id: WireId | None = None
    created_at: WireTime | None = None


# -- commands --------------------------------------------------------------------------------


class ClaimIn(_In):
    worker_id: str = Field(min_length=1, max_length=200, json_schema_extra=NO_NUL)
    lease_seconds: float | None = Field(default=None, gt=0, le=3600)


class ClaimNextIn(ClaimIn):
    pool: str | None = Field(default=None, max_length=100, json_schema_extra=NO_NUL)
    limit: int = Field(default=1, ge=1, le=100)


class HeartbeatIn(ClaimIn):
    epoch: int = Field(ge=0, le=MAX_ID)


class ReleaseIn(_In):
    worker_id: str = Field(min_length=1, max_length=200, json_schema_extra=NO_NUL)
    epoch: int = Field(ge=0, le=MAX_ID)


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
    ignored: list[IdOut] = Field(
        default_factory=list, description="[milepost extension] ids of reports accepted but "
        "not stored: their execution had already ended, and its log ends with its end.")  # fmt: skip
    ignored_reasons: dict[str, str] | None = Field(
        default=None, description="[milepost extension] why each id of `ignored` was not "
        "stored (left out when nothing was ignored).")  # fmt: skip
    stored_ids: list[IdOut] = Field(default_factory=list,
                                  description="[milepost extension] the ids written by this "
                                  "call (`stored` of them; stale ones included).")  # fmt: skip
    duplicates: list[IdOut] = Field(default_factory=list,
                                  description="[milepost extension] ids the log already held "
                                  "for the same event: accepted, not stored again.")  # fmt: skip
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


# -- workers ---------------------------------------------------------------------------------


class MachineIdIn(_In):
    worker_id: str = Field(min_length=1, max_length=200)
    machine_id: int | None = Field(default=None, ge=0, le=MAX_MACHINE,
                                   description="The id held now, to renew; left out to "
                                   "lease a new one.")  # fmt: skip


class MachineIdOut(BaseModel):
    machine_id: int
    expires_at: float
    """Seconds since the epoch; renew well before."""
    renewed: bool
    """False when `machine_id` is a new lease (the one asked for was lost, or none was)."""


# -- credentials -----------------------------------------------------------------------------


class CredentialIn(_In):
    name: Annotated[str, AfterValidator(credentials.check_name)] = Field(
        description=credentials.NAME_RULE)
    type: str = Field(min_length=1, max_length=100, json_schema_extra=NO_NUL)
    data: FreeJson


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
