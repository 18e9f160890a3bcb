"""Template syntax checked at load (DSL 12.2): a `{{ ... }}` or `{% ... %}` that Jinja cannot
parse is a validation error naming the field and its line, not a failure of the run that
first renders it. Everything DSL 9.1 renders is walked (python `code` included); `desc` and
names are never rendered, so never checked."""

from __future__ import annotations

from typing import Any

from jinja2.exceptions import TemplateSyntaxError

from milepost.playbook import problems
from milepost.playbook import templates as tp
from milepost.playbook.coercion import is_template

_NEVER_RENDERED = frozenset({"step", "desc", "name"})
_SHOWN = 60


def check(raw: dict[str, Any], w: problems.Where) -> None:
    """Report every template under a step (or a workbook entry) that does not parse."""
    for key, value in raw.items():
        if key not in _NEVER_RENDERED:
            _walk(value, w / key)


def _walk(value: Any, w: problems.Where) -> None:
    if isinstance(value, str):
        if is_template(value):
            error = tp.lookup(value).error
            if isinstance(error, TemplateSyntaxError):
                w.error(
                    f"template syntax error: {error.message or 'syntax error'} in '{_short(value)}'"
                )
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk(item, w / str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk(item, w / i)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
