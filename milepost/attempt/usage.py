"""Usage out of a tool's result (DSL 10.6): the python `usage` global, or the `usage` key
of an http response's JSON body. It leaves the result data here, so a step's result never
holds it, and goes on the command's report (`AttemptResult.usage`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from milepost.core import usage
from milepost.tools.base import ToolResult

_KNOWN = frozenset(
    {
        "input_tokens",
        "output_tokens",
        "prompt_tokens",
        "completion_tokens",
        "cost",
        "provider",
        "model",
    }
)


def take(result: ToolResult, where: str) -> tuple[ToolResult, list[dict[str, Any]]]:
    """The result without its usage, and the usage as payload entries (`core.usage`);
    `usage.UsageInvalid` when what the tool reported cannot be counted."""
    if result.usage is not None:
        return result, usage.parse(result.usage, where)
    body = _http_body(result)
    if body is None:
        return result, []
    entries = usage.parse(body["usage"], where)
    rest = {k: v for k, v in body.items() if k != "usage"}
    assert isinstance(result.data, dict)
    data = {**result.data, **{k: rest for k in ("data", "body") if k in result.data}}
    return dataclasses.replace(result, data=data), entries


def _http_body(result: ToolResult) -> dict[str, Any] | None:
    """An http response body reporting usage: a mapping under `usage` with a key usage
    has (another API's `usage` of its own shape is left in the data)."""
    if result.http is None or not isinstance(result.data, dict):
        return None
    body = result.data.get("data")
    if not isinstance(body, dict):
        return None
    reported = body.get("usage")
    if not isinstance(reported, Mapping) or not _KNOWN.intersection(reported):
        return None
    return body
