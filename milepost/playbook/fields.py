"""Checks of single fields, shared by every section: each reports what is wrong at `w`
and returns a usable fallback, so loading goes on and finds every problem at once."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from milepost.playbook import model, problems

_M = TypeVar("_M", bound=BaseModel)

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

BACKOFFS = ("none", "fixed", "linear", "exponential")
"""Backoff kinds of step retries and of policy `do: retry` (DSL 5, 10.1)."""


def mapping(raw: Any, w: problems.Where) -> dict[str, Any]:
    """`raw` as a mapping with string keys (null -> {}); otherwise a problem and {}."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        w.error(f"expected a mapping, got {problems.type_name(raw)}")
        return {}
    bad = [k for k in raw if not isinstance(k, str)]
    for key in bad:
        w.error(f"keys must be strings, got {key!r}")
    return {k: v for k, v in raw.items() if isinstance(k, str)}


def check_keys(raw: dict[str, Any], w: problems.Where, allowed: Iterable[str]) -> None:
    allowed = frozenset(allowed)
    for key in raw:
        if key not in allowed:
            (w / key).error(
                f"unknown field {key!r} (expected one of: {', '.join(sorted(allowed))})",
                show="parent",
            )


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_template(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def condition(raw: Any, w: problems.Where) -> Any:
    """A `when`: a template string or a YAML boolean."""
    if isinstance(raw, bool | str):
        return raw
    w.error(f"expected a template string or a boolean, got {problems.type_name(raw)}")
    return None


def count(raw: Any, w: problems.Where, minimum: int = 1) -> int | None:
    if is_int(raw) and raw >= minimum:
        return int(raw)
    w.error(f"expected an integer >= {minimum}, got {raw!r}")
    return None


def choice(raw: Any, w: problems.Where, choices: Iterable[str]) -> str | None:
    choices = tuple(choices)
    if isinstance(raw, str) and raw in choices:
        return raw
    w.error(f"expected one of {', '.join(choices)}, got {raw!r}")
    return None


def name(raw: Any, w: problems.Where, what: str) -> str | None:
    """A step, task, iterator or keychain name: an identifier that is not reserved."""
    if not isinstance(raw, str) or not _NAME_RE.match(raw):
        w.error(f"invalid {what} name {raw!r} (letters, digits and _, not starting with a digit)")
        return None
    if raw in model.RESERVED_NAMES:
        w.error(f"{what} name {raw!r} is reserved")
        return None
    return raw


def set_block(raw: Any, w: problems.Where, *, bare_ok: bool) -> dict[str, Any]:
    """A `set` mapping. Step and arc sets write `ctx.*` only; task and policy sets also
    `iter.*`, `step.*` and bare (pipeline-local) keys."""
    values = mapping(raw, w)
    for key in values:
        head, dot, rest = key.partition(".")
        scoped = dot and rest and (head == "ctx" or (bare_ok and head in ("iter", "step")))
        if scoped or (bare_ok and not dot and key):
            continue
        allowed = "'ctx.<name>', 'iter.<name>', 'step.<name>' or a bare name"
        if not bare_ok:
            allowed = "'ctx.<name>' (bare keys are allowed only in task and policy set)"
        (w / key).error(f"invalid key {key!r}: expected {allowed}", show="parent")
    return values


def build(w: problems.Where, factory: type[_M], /, **kwargs: Any) -> _M | None:
    """Construct a model; a validation error (a gap in the checks above) becomes a problem."""
    try:
        return factory(**kwargs)
    except ValidationError as exc:
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            w.error(f"{loc}: {err['msg']}" if loc else err["msg"])
        return None
