"""Subset matching of expected values against actual results (conformance README).

`match(expected, actual)` returns one description per mismatch; an empty list is a match.

- mapping: every expected key must exist in the actual mapping and match; extra keys are fine.
- list: same length, elements matched pairwise in order.
- number: equal as numbers (`30` matches `30.0`, relative tolerance 1e-9); booleans only
  match booleans, strings only strings, `null` only null.
- a non-empty mapping whose keys all start with `$` is a matcher: `$any_of`, `$len`, `$gte`,
  `$lte`, `$regex` (searched), `$type`, `$contains`; several keys combine (all must hold).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["MATCHERS", "TYPE_NAMES", "is_matcher", "match"]

REL_TOL = 1e-9
TYPE_NAMES = ("string", "number", "integer", "boolean", "null", "object", "array")
_SHOW_WIDTH = 80


def match(expected: Any, actual: Any, path: str = "$") -> list[str]:
    """Mismatches between `expected` (a subset pattern) and `actual`, each `"<path>: <text>"`."""
    if is_matcher(expected):
        return _match_matcher(expected, actual, path)
    if isinstance(expected, Mapping):
        return _match_mapping(expected, actual, path)
    if isinstance(expected, list | tuple):
        return _match_list(expected, actual, path)
    if _scalar_equal(expected, actual):
        return []
    return [f"{path}: expected {_show(expected)}, got {_show(actual)}"]


def is_matcher(value: Any) -> bool:
    """A non-empty mapping whose keys are all strings starting with `$`."""
    return (
        isinstance(value, Mapping)
        and bool(value)
        and all(isinstance(k, str) and k.startswith("$") for k in value)
    )


# --------------------------------------------------------------------------- structures


def _match_mapping(expected: Mapping[Any, Any], actual: Any, path: str) -> list[str]:
    if not isinstance(actual, Mapping):
        return [f"{path}: expected an object, got {_show(actual)}"]
    problems: list[str] = []
    for key, value in expected.items():
        where = _key_path(path, key)
        if key not in actual:
            problems.append(f"{where}: missing (keys present: {_keys(actual)})")
        else:
            problems.extend(match(value, actual[key], where))
    return problems


def _match_list(expected: list[Any] | tuple[Any, ...], actual: Any, path: str) -> list[str]:
    if not _is_array(actual):
        return [f"{path}: expected an array of {len(expected)}, got {_show(actual)}"]
    if len(expected) != len(actual):
        return [f"{path}: expected {len(expected)} element(s), got {len(actual)}: {_show(actual)}"]
    problems: list[str] = []
    for i, (want, got) in enumerate(zip(expected, actual, strict=True)):
        problems.extend(match(want, got, f"{path}[{i}]"))
    return problems


# --------------------------------------------------------------------------- scalars


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_array(value: Any) -> bool:
    return isinstance(value, list | tuple)


def _numbers_equal(a: int | float, b: int | float) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b  # exact, also beyond float range
    try:
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)
    except OverflowError:  # an int too large for a float cannot equal a finite float
        return False


def _scalar_equal(expected: Any, actual: Any) -> bool:
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if _is_number(expected) or _is_number(actual):
        return _is_number(expected) and _is_number(actual) and _numbers_equal(expected, actual)
    if isinstance(expected, str) or isinstance(actual, str):
        return isinstance(expected, str) and isinstance(actual, str) and expected == actual
    # anything else YAML can produce (dates, ...) compares by type and value
    return type(expected) is type(actual) and bool(expected == actual)


# --------------------------------------------------------------------------- matchers


def _match_matcher(spec: Mapping[str, Any], actual: Any, path: str) -> list[str]:
    problems: list[str] = []
    for key, arg in spec.items():
        check = MATCHERS.get(key)
        if check is None:
            problems.append(f"{path}: unknown matcher {key!r} (known: {', '.join(MATCHERS)})")
        else:
            problems.extend(check(arg, actual, path))
    return problems


def _any_of(alternatives: Any, actual: Any, path: str) -> list[str]:
    if not _is_array(alternatives) or not alternatives:
        return [f"{path}: $any_of needs a non-empty list, got {_show(alternatives)}"]
    if any(not match(alt, actual, path) for alt in alternatives):
        return []
    return [f"{path}: expected any of {_show(list(alternatives))}, got {_show(actual)}"]


def _len(want: Any, actual: Any, path: str) -> list[str]:
    if not isinstance(actual, list | tuple | str | Mapping):
        return [
            f"{path}: expected something with a length ($len {_show(want)}), got {_show(actual)}"
        ]
    got = len(actual)
    if match(want, got, path):
        return [f"{path}: expected length {_show(want)}, got {got}"]
    return []


def _bound(name: str, holds: Callable[[Any, Any], bool]) -> Callable[[Any, Any, str], list[str]]:
    def check(limit: Any, actual: Any, path: str) -> list[str]:
        if not _is_number(limit):
            return [f"{path}: {name} needs a number, got {_show(limit)}"]
        if not _is_number(actual):
            return [f"{path}: expected a number {name} {_show(limit)}, got {_show(actual)}"]
        if holds(actual, limit) or _numbers_equal(actual, limit):
            return []
        return [f"{path}: expected {name} {_show(limit)}, got {_show(actual)}"]

    return check


def _regex(pattern: Any, actual: Any, path: str) -> list[str]:
    if not isinstance(pattern, str):
        return [f"{path}: $regex needs a string, got {_show(pattern)}"]
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return [f"{path}: invalid $regex {pattern!r}: {exc}"]
    if not isinstance(actual, str):
        return [f"{path}: expected a string matching /{pattern}/, got {_show(actual)}"]
    if compiled.search(actual) is None:
        return [f"{path}: expected a string matching /{pattern}/, got {_show(actual)}"]
    return []


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if _is_array(value):
        return "array"
    return type(value).__name__


def _has_type(value: Any, name: str) -> bool:
    kind = _type_of(value)
    if name == "number":
        return kind in ("number", "integer")
    if name == "integer":  # as in JSON Schema, 3.0 is an integer (30 also matches 30.0)
        return kind == "integer" or (
            kind == "number" and math.isfinite(value) and float(value).is_integer()
        )
    return kind == name


def _type(name: Any, actual: Any, path: str) -> list[str]:
    names = list(name) if _is_array(name) else [name]
    unknown = [n for n in names if n not in TYPE_NAMES]
    if unknown or not names:
        return [f"{path}: unknown $type {_show(name)} (known: {', '.join(TYPE_NAMES)})"]
    if any(_has_type(actual, n) for n in names):
        return []
    return [f"{path}: expected type {' or '.join(names)}, got {_type_of(actual)} {_show(actual)}"]


def _contains(subset: Any, actual: Any, path: str) -> list[str]:
    if not _is_array(actual):
        return [f"{path}: expected an array containing {_show(subset)}, got {_show(actual)}"]
    if any(not match(subset, item, path) for item in actual):
        return []
    return [f"{path}: no element matches {_show(subset)} (got {_show(actual)})"]


MATCHERS: dict[str, Callable[[Any, Any, str], list[str]]] = {
    "$any_of": _any_of,
    "$len": _len,
    "$gte": _bound("$gte", lambda a, b: a >= b),
    "$lte": _bound("$lte", lambda a, b: a <= b),
    "$regex": _regex,
    "$type": _type,
    "$contains": _contains,
}
"""Matcher name -> check(argument, actual, path) returning mismatches."""


# --------------------------------------------------------------------------- messages


def _key_path(path: str, key: Any) -> str:
    text = str(key)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        return f"{path}.{text}"
    return f"{path}[{json.dumps(text)}]"


def _keys(value: Mapping[Any, Any]) -> str:
    keys = [str(k) for k in value]
    text = ", ".join(keys[:12])
    return text + (", ..." if len(keys) > 12 else "") if keys else "none"


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, default=repr, sort_keys=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _SHOW_WIDTH else text[: _SHOW_WIDTH - 3] + "..."
