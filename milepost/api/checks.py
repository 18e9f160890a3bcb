"""The checked base types of the HTTP API's models: ids, times, free JSON, and the base
class of every request model (`milepost.api.schemas` holds the models built on them).

Ids are accepted as JSON strings or integers and returned as strings; times are returned
as ISO-8601 UTC strings.

Every value is checked here, at the edge, so that nothing the databases or the engine
cannot take back is stored: times within `TIME_RANGE`, free JSON (`FreeJson`) finite and
at most `max_json_depth` deep (a run's workload also at most `max_expanded_bytes`), and
no NUL in any string of a request model (PostgreSQL refuses it in text columns).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic.config import JsonDict

from milepost.ids import MAX_ID, parse_id
from milepost.playbook import yamllines
from milepost.settings import Settings

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
text cannot hold NUL); `Checked` enforces it with its own message, so it is only shown."""


class _Limits:
    """The settings the validators read; `configure` sets them as an app is made."""

    max_json_depth = Settings.model_fields["max_json_depth"].default
    max_expanded_bytes = Settings.model_fields["max_expanded_bytes"].default


def configure(settings: Settings) -> None:
    _Limits.max_json_depth = settings.max_json_depth
    _Limits.max_expanded_bytes = settings.max_expanded_bytes


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
        raise ValueError(
            f"a time is epoch seconds (or ISO-8601) between 2000-01-01 and "
            f"2200-01-01 UTC, got {value!r}{hint}"
        )
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


def check_workload(value: Any) -> Any:
    """A run's workload: free JSON (`check_json`) whose expanded size, counted as a
    playbook's (`yamllines.expanded_size`), is within `max_expanded_bytes`, as `milepost
    run --payload/--set` are: one bound on what a run starts with, whoever sends it."""
    check_json(value)
    refused = yamllines.over_expanded(value, _Limits.max_expanded_bytes, "the workload")
    if refused is not None:
        raise ValueError(refused)
    return value


def no_nul(value: Any) -> Any:
    if isinstance(value, str) and "\x00" in value:
        raise ValueError(NUL_MESSAGE)
    return value


# the JSON Schema says what the validators take and what `views` writes (documentation only:
# output models are built from typed values, so nothing is checked twice on the hot paths)
WireId = Annotated[
    int,
    BeforeValidator(parse_id),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": MAX_ID},
                {"type": "string", "pattern": ID_PATTERN},
            ],
            "description": "A snowflake id: a JSON integer or a string of digits.",
        }
    ),
]
WireTime = Annotated[
    float,
    BeforeValidator(parse_time),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": TIME_RANGE[0], "exclusiveMaximum": TIME_RANGE[1]},
                {"type": "string"},
            ],
            "description": "Epoch seconds, or ISO-8601 text (UTC when it names no zone), from "
            "2000-01-01 to 2200-01-01 UTC.",
        }
    ),
]
IdOut = Annotated[str, WithJsonSchema({"type": "string", "pattern": ID_PATTERN})]
"""An id as the API returns it: a string of digits (JSON numbers lose precision past 2^53)."""
TimeOut = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
"""A time as the API returns it: ISO-8601 UTC, milliseconds (`iso`)."""
FreeJson = Annotated[dict[str, Any], AfterValidator(check_json)]
"""A JSON object a client chooses freely (meta, context, credential data)."""
Workload = Annotated[dict[str, Any], AfterValidator(check_workload)]
"""A run's workload: free JSON within `max_expanded_bytes`."""


def _takes_bool(annotation: Any) -> bool:
    """Whether a field's type admits a JSON boolean (`bool`, `Any`, or a union with one)."""
    if annotation is bool or annotation is Any:
        return True
    return any(_takes_bool(arg) for arg in get_args(annotation))


class Checked(BaseModel):
    """Request models: no NUL in any string field (free JSON is stored as JSON text, where
    it is escaped), and no boolean where a number is meant (pydantic's lax mode reads
    `false` as 0: `{"epoch": false}` was epoch 0, `{"limit": true}` a limit of 1)."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if (
            isinstance(value, bool)
            and info.field_name is not None
            and not _takes_bool(cls.model_fields[info.field_name].annotation)
        ):
            raise ValueError("a boolean is not a valid value here")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        return no_nul(value)


class StrictIn(Checked):
    """A request model that refuses fields it does not know."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
