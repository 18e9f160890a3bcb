"""What rendered text becomes (DSL 9.3): numbers, booleans, null, JSON and Python
literals are read back into values, anything else stays text."""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

# JSON number grammar: `007` or `1_000` stay strings (zip codes, ids), as in JSON and Python.
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_CONSTANTS: dict[str, Any] = {
    "true": True,
    "True": True,
    "false": False,
    "False": False,
    "null": None,
    "None": None,
    "": None,
}


def is_template(value: object) -> bool:
    """True for a str containing `{{` or `{%` (the only strings that are rendered)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def coerce(text: str) -> Any:
    """DSL 9.3 coercion of rendered text; anything unrecognised is returned as the string."""
    stripped = text.strip()
    if stripped in _CONSTANTS:
        return _CONSTANTS[stripped]
    first = stripped[0]
    if (first == "{" and stripped[-1] == "}") or (first == "[" and stripped[-1] == "]"):
        try:
            return json.loads(stripped)
        except ValueError:
            pass
        # Python literal syntax: a dict printed into a template renders as its repr
        # (`{'a': None, 'b': True}`).
        try:
            parsed = ast.literal_eval(stripped)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
        else:
            # A set literal (`{1, 2}`) is not a JSON value: keep the text.
            if isinstance(parsed, (dict, list)):
                return parsed
    elif first == "-" or first.isdigit():
        if _INT.fullmatch(stripped):
            return int(stripped)
        if _FLOAT.fullmatch(stripped):
            number = float(stripped)
            if math.isfinite(number):  # `1e999` would not survive JSON storage
                return number
    return str(text)  # drops str subclasses such as Markup
