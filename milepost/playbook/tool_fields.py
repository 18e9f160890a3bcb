"""The fields each tool kind knows (DSL 3, 10, 11, 12), and the warning for any other
(DSL 12.2): `tool field 'methd' is not a field of http (did you mean 'method'?)`.

An unknown field is a warning, not an error, because NoETL playbooks carry fields milepost
does not use; but a misspelt one (`methd: POST`) would otherwise silently run a GET, so the
warning names the closest known field. Every field a tool under `milepost/tools/` reads is
listed here, with the aliases of DSL 11 and 12.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from milepost.playbook import nats_ops, problems

COMMON = frozenset({"kind", "name", "desc", "input", "args", "set", "spec"})
"""Fields of every tool and task (DSL 3, 4, 5)."""

_SCRIPT = ("script",)  # DSL 12: `script: {uri, source: {type: file}}` (python, sql kinds)

KNOWN: dict[str, frozenset[str]] = {
    "python": frozenset({"code", "libs", *_SCRIPT}),
    "http": frozenset(
        {
            "url",
            "endpoint",
            "method",
            "headers",
            "params",
            "json",
            "body",
            "data",
            "payload",
            "timeout",
            "follow_redirects",
            "verify_ssl",
            "auth",
        }
    ),
    "postgres": frozenset(
        {
            "command",
            "query",
            "params",
            "auth",
            "credential",
            "connection_string",
            "schema",
            *_SCRIPT,
        }
    ),
    "duckdb": frozenset(
        {
            "query",
            "command",
            "commands",
            "cmds",
            "queries",
            "cmd",
            "database",
            "params",
            "auth",
            *_SCRIPT,
        }
    ),
    "shell": frozenset({"command", "cmds", "cmd", "cwd", "env", "timeout"}),
    "noop": frozenset(),
    "workbook": frozenset(),
    "playbook": frozenset(
        {"path", "return_step", "return_result", "result_step", "timeout", "payload", "version"}
    ),
    # read off the tool's own table (`object` names the object in a pipeline, where
    # `name` is the task's)
    "nats": frozenset({"auth", "operation", "object", "timeout", *nats_ops.FIELDS}),
}
"""Per tool kind, its own fields (beside `COMMON`)."""


def known(kind: str) -> frozenset[str]:
    """Every field a tool of `kind` may have."""
    return COMMON | KNOWN.get(kind, frozenset())


def suggestion(key: str, candidates: Iterable[str]) -> str | None:
    """The known field closest to `key`, if one is close enough to be a misspelling."""
    close = difflib.get_close_matches(key, sorted(candidates), n=1, cutoff=0.6)
    return close[0] if close else None


def check(raw: dict[str, Any], w: problems.Where, kind: str, skip: Iterable[str] = ()) -> None:
    """Warn about each field of the tool mapping `raw` that `kind` does not know;
    `skip`: fields reported otherwise (rejected or ignored ones)."""
    fields = known(kind)
    skipped = set(skip)
    for key in raw:
        if key in fields or key in skipped or not isinstance(key, str):
            continue
        hint = suggestion(key, fields - COMMON) or suggestion(key, fields)
        text = f"tool field {key!r} is not a field of {kind}"
        if hint is not None:
            text += f" (did you mean {hint!r}?)"
        (w / key).warn(text, show="parent")
