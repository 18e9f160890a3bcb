"""A python tool's `code` that does not parse is a validation error (DSL 12.2), not a
run-time failure: `ast.parse` accepts what the worker runs (a top-level `return` too,
which only the compiler refuses), so it refuses nothing the worker would run."""

from __future__ import annotations

import ast
from typing import Any

from milepost.playbook import problems
from milepost.playbook.coercion import is_template


def check(code: Any, w: problems.Where) -> None:
    """Report `code`'s syntax error with its line in the code; a template is rendered
    first at run time, so only its rendered text can be checked."""
    if not isinstance(code, str) or is_template(code):
        return
    try:
        ast.parse(code, "<code>")
    except SyntaxError as exc:
        w.error(f"python syntax error: {exc.msg} (line {exc.lineno} of the code)")
