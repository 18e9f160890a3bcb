"""Template rendering for playbooks (DSL section 9).

Everything a playbook renders goes through `render_value` (step input, tool fields,
`loop.in`, `set` values) or `render_when` (arc, policy and admission guards). The module is
pure: no I/O, no clock, no logging; callers decide what to log. The environment and its
cache are `templates`, what rendered text becomes is `coercion`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal

from jinja2 import meta
from jinja2.exceptions import TemplateSyntaxError, UndefinedError
from jinja2.runtime import Undefined

from milepost.errors import TemplateError, UndefinedValue
from milepost.playbook import templates as tp
from milepost.playbook.coercion import coerce, is_template
from milepost.playbook.loop_result import LoopResult
from milepost.sanitize import strings_in

__all__ = ["check_when", "names_read", "render_value", "render_when"]

# Long templates (a templated python `code` field) would make unreadable error messages.
_MAX_TEMPLATE_IN_MESSAGE = 500
_MISSING = object()

_RenderMode = Literal["strict", "set", "when"]


def names_read(value: Any) -> frozenset[str] | None:
    """The context names the templates in `value` read (nested mappings and lists walked;
    keys are never rendered), or None when one of them does not parse: its render reports
    the error, and until then any name may be read."""
    names: set[str] = set()
    for text in strings_in(value):
        if not is_template(text):
            continue
        found = _names_in(text)
        if found is None:
            return None
        names |= found
    return frozenset(names)


@functools.lru_cache(maxsize=tp.CACHE_MAX)
def _names_in(source: str) -> frozenset[str] | None:
    match = tp.SINGLE_EXPR.fullmatch(source)
    name = None if match is None else tp.plain_name(match.group(1))
    if name is not None:
        return frozenset((name,))
    try:
        return frozenset(meta.find_undeclared_variables(tp.ENV.parse(source)))
    except TemplateSyntaxError:
        return None


def _shorten(template: str) -> str:
    if len(template) <= _MAX_TEMPLATE_IN_MESSAGE:
        return template
    return template[:_MAX_TEMPLATE_IN_MESSAGE] + "..."


def _undefined_error(where: str, template: str, exc: UndefinedError) -> UndefinedValue:
    name = getattr(exc, "name", None)
    shown = _shorten(template)
    if name is None:
        # An undefined created without a name (rare); the Jinja message is the best clue.
        message = f"{where}: undefined value ({exc.message}) in '{shown}'"
    else:
        message = f"{where}: undefined name '{name}' in '{shown}'"
    return UndefinedValue(
        message, where=where, name=None if name is None else str(name), template=template
    )


def _template_error(where: str, template: str, exc: Exception) -> TemplateError:
    if isinstance(exc, TemplateSyntaxError):
        detail = exc.message or "syntax error"
        if "\n" in template:
            detail += f" (line {exc.lineno})"
    elif type(exc).__module__.startswith("jinja2"):
        detail = str(exc)  # Jinja's messages are written for template authors
    else:
        # Python errors from expressions/filters: the class name is half the message
        # (`KeyError: 'x'` says more than `'x'`).
        detail = f"{type(exc).__name__}: {exc}"
    return TemplateError(
        f"{where}: {detail} in '{_shorten(template)}'", where=where, template=template
    )


def _scrub(value: Any, strict: bool) -> Any:
    """Undefineds nested in a computed value (`{{ [x, 1] }}`): raise (strict) or null (set).

    Copy-on-write: containers without undefineds are returned as they are.
    """
    if isinstance(value, Undefined):
        if strict:
            value._fail_with_undefined_error()
        return None
    if isinstance(value, dict):
        out: dict[Any, Any] | None = None
        for key, item in value.items():
            new = _scrub(item, strict)
            if new is not item:
                if out is None:
                    out = dict(value)
                out[key] = new
        return value if out is None else out
    if isinstance(value, (list, tuple)):
        items: list[Any] | None = None
        for index, item in enumerate(value):
            new = _scrub(item, strict)
            if new is not item:
                if items is None:
                    items = list(value)
                items[index] = new
        if items is None:
            return value
        if isinstance(value, LoopResult):
            return LoopResult(items, value.failed)
        return tuple(items) if isinstance(value, tuple) else items
    return value


def _full(compiled: tp.Compiled) -> tp.Compiled:
    """A plain-name template compiled by Jinja (for a name the context lacks)."""
    if compiled.template is None and compiled.name is not None:
        compiled.template = tp.compile_expression(compiled.name).template
    return compiled


def _render_str(text: str, context: Mapping[str, Any], where: str, mode: _RenderMode) -> Any:
    compiled = tp.lookup(text)
    if compiled.name is not None:
        value = context.get(compiled.name, _MISSING)
        if value is _MISSING:
            value = tp.GLOBALS.get(compiled.name, _MISSING)
        if value is not _MISSING:
            # what Jinja would give: a plain path needs no scrub, text is coerced
            return coerce(value) if isinstance(value, str) else value
        compiled = _full(compiled)  # undefined: Jinja's own error and `set`-mode handling
    if compiled.error is not None:
        raise _template_error(where, text, compiled.error)
    template = compiled.template
    strict = mode == "strict"
    token = tp.STRICT.set(True) if strict else None
    try:
        # shared=True: the merged dict below is already private to this render, so Jinja
        # need not copy it again.
        ctx = template.new_context({**tp.GLOBALS, **context}, shared=True)
        if compiled.is_expr:
            for _ in template.root_render_func(ctx):
                pass
            value = ctx.vars["result"]
            if isinstance(value, Undefined):
                if mode == "set":
                    return None
                value._fail_with_undefined_error()
            if compiled.needs_scrub and mode != "when":
                value = _scrub(value, strict)
            if not isinstance(value, str):
                return value
        else:
            value = "".join(template.root_render_func(ctx))
    except UndefinedError as exc:
        if mode == "set":
            return None
        raise _undefined_error(where, text, exc) from exc
    except Exception as exc:
        raise _template_error(where, text, exc) from exc
    finally:
        if token is not None:
            tp.STRICT.reset(token)
    return coerce(value)


def _render(value: Any, context: Mapping[str, Any], where: str, mode: _RenderMode) -> Any:
    if isinstance(value, str):
        if "{{" in value or "{%" in value:
            return _render_str(value, context, where, mode)
        return value  # untemplated strings keep their YAML type: `'2'` stays '2'
    if isinstance(value, Mapping):
        # Keys are names, never rendered (9.1).
        return {key: _render(item, context, where, mode) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_render(item, context, where, mode) for item in value]
        if isinstance(value, LoopResult):
            return LoopResult(items, value.failed)
        return tuple(items) if isinstance(value, tuple) else items
    return value


def render_value(
    value: Any, context: Mapping[str, Any], *, where: str, mode: str = "strict"
) -> Any:
    """Render `value` recursively (DSL 9.3/9.4).

    `where` prefixes every error message (`step 'end': input 'result'`). Modes:
    - `strict` (step input, tool fields, `loop.in`): an undefined value reaching the output
      raises `UndefinedValue`; other failures raise `TemplateError`.
    - `set`: an undefined value becomes None (printed into text it is ''); other failures
      still raise `TemplateError`.
    """
    if mode not in ("strict", "set"):
        raise ValueError(f"unknown render mode {mode!r} (expected 'strict' or 'set')")
    return _render(value, context, where, "strict" if mode == "strict" else "set")


def check_when(value: Any, context: Mapping[str, Any], *, where: str) -> tuple[bool, str | None]:
    """`render_when` plus the reason a guard was forced false (for the caller to log).

    The reason is None when the guard rendered cleanly (true or false).
    """
    if isinstance(value, bool):
        return value, None
    try:
        rendered = _render(value, context, where, "when")
    except TemplateError as exc:  # UndefinedValue included
        return False, exc.message
    except Exception as exc:  # a guard is never fatal (DSL 8), whatever went wrong
        return False, f"{where}: {type(exc).__name__}: {exc}"
    if isinstance(rendered, str) and not is_template(value):
        # A literal `when: "false"` means false, like the rendered text would.
        rendered = coerce(rendered)
    try:
        return bool(rendered), None
    except Exception as exc:
        return False, f"{where}: {type(exc).__name__}: {exc}"


def render_when(value: Any, context: Mapping[str, Any], *, where: str) -> bool:
    """Evaluate a guard: a render error or an undefined result is False, never an error.

    `None` (no `when` at all) is the caller's to interpret; here it is simply falsy.
    """
    return check_when(value, context, where=where)[0]
