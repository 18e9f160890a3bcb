"""Template rendering for playbooks (DSL section 9).

Everything a playbook renders goes through `render_value` (step input, tool fields,
`loop.in`, `set` values) or `render_when` (arc, policy and admission guards). The module is
pure: no I/O, no clock, no logging; callers decide what to log.

Design notes:
- One module-level `SandboxedEnvironment`: playbooks are user-supplied, so templates must not
  reach Python internals (`''.__class__.__mro__`); unsafe attribute access raises at once
  instead of the sandbox's default of silently yielding an undefined.
- Compiled templates and expressions are cached by source string: the same handful of
  templates is rendered thousands of times per run, and compiling is ~100x rendering.
- How an undefined value is treated depends on the *mode* of the render, but the Undefined
  class is fixed per environment. The strict mode is therefore signalled through a
  `ContextVar` that `_Undefined.__str__` consults, so one environment and one cache serve
  all modes (and concurrent renders in other threads are unaffected).
"""

from __future__ import annotations

import ast
import base64
import contextlib
import functools
import json
import math
import re
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Any, Literal, NoReturn, SupportsIndex, overload

from jinja2 import meta, nodes
from jinja2.exceptions import SecurityError, TemplateSyntaxError, UndefinedError
from jinja2.parser import Parser
from jinja2.runtime import ChainableUndefined, Undefined
from jinja2.sandbox import SandboxedEnvironment

from milepost.errors import TemplateError, UndefinedValue
from milepost.sanitize import strings_in

__all__ = [
    "LoopResult",
    "check_when",
    "coerce",
    "compile_cache_info",
    "is_template",
    "names_read",
    "render_value",
    "render_when",
]

Mode = Literal["strict", "set"]

# Long templates (a templated python `code` field) would make unreadable error messages.
_MAX_TEMPLATE_IN_MESSAGE = 500
_CACHE_MAX = 4096


# --------------------------------------------------------------------------------------------
# Loop results


class LoopResult(list[Any]):
    """A loop step's result: the list of per-iteration results, also answering .results/.data
    (the list itself), .stats ({total, success, failed}), .get("results"|"data"|"stats",
    default) and x["results"|"data"|"stats"] (string keys only; integer indexing works as a
    list). Picklable (it is sent to worker processes) and json.dumps-able as a plain list.

    Both upstream NoETL engines shaped loop results differently (a bare list vs. a
    `{results, stats}` mapping); answering both ways lets fixtures written for either work.
    """

    __slots__ = ("failed",)

    _KEYS = frozenset({"results", "data", "stats"})

    def __init__(self, items: Iterable[Any] = (), failed: int = 0) -> None:
        super().__init__(items)
        # Iterations whose error a policy let through (counted, not dropped).
        self.failed = failed

    @property
    def results(self) -> LoopResult:
        return self

    @property
    def data(self) -> LoopResult:
        return self

    @property
    def stats(self) -> dict[str, int]:
        total = len(self)
        return {"total": total, "success": total - self.failed, "failed": self.failed}

    def get(self, key: object, default: Any = None) -> Any:
        if isinstance(key, str) and key in self._KEYS:
            return self.stats if key == "stats" else self
        return default

    @overload
    def __getitem__(self, key: SupportsIndex, /) -> Any: ...

    @overload
    def __getitem__(self, key: slice, /) -> list[Any]: ...

    @overload
    def __getitem__(self, key: str, /) -> Any: ...

    def __getitem__(self, key: SupportsIndex | slice | str, /) -> Any:
        if isinstance(key, str):
            if key in self._KEYS:
                return self.stats if key == "stats" else self
            # KeyError (a LookupError) lets Jinja's getitem fall back as for any container.
            raise KeyError(key)
        return super().__getitem__(key)

    def __reduce__(self) -> tuple[Any, ...]:
        # Explicit so pickling/copying never depends on how list subclasses with
        # __slots__ are reduced, and `failed` always survives the trip to a worker.
        return (LoopResult, (list(self), self.failed))

    def __repr__(self) -> str:
        return f"LoopResult({list.__repr__(self)}, failed={self.failed})"


# --------------------------------------------------------------------------------------------
# Undefined handling

# True while a strict-mode render runs in this thread/task (see module docstring).
_STRICT: ContextVar[bool] = ContextVar("milepost_render_strict", default=False)


class _UndefinedNameError(UndefinedError):
    """An undefined value was used; carries the name so the message can cite it."""

    def __init__(self, message: str, name: object) -> None:
        super().__init__(message)
        self.name = name


class _Undefined(ChainableUndefined):
    """Falsy, chainable (`a.b.c` stays undefined), printable as '' except in strict mode.

    Every failing operation raises `_UndefinedNameError` so the caller can recover the name.
    The operator dunders are re-bound here because in `Undefined` they point at the base
    class's function object, which an override of `_fail_with_undefined_error` would not
    reach.
    """

    __slots__ = ()

    def _fail_with_undefined_error(self, *args: Any, **kwargs: Any) -> NoReturn:
        if self._undefined_exception is not UndefinedError:
            raise self._undefined_exception(self._undefined_message)
        raise _UndefinedNameError(self._undefined_message, self._undefined_name)

    __add__ = __radd__ = __sub__ = __rsub__ = _fail_with_undefined_error
    __mul__ = __rmul__ = __div__ = __rdiv__ = _fail_with_undefined_error
    __truediv__ = __rtruediv__ = _fail_with_undefined_error
    __floordiv__ = __rfloordiv__ = _fail_with_undefined_error
    __mod__ = __rmod__ = _fail_with_undefined_error
    __pos__ = __neg__ = _fail_with_undefined_error
    __call__ = _fail_with_undefined_error
    __lt__ = __le__ = __gt__ = __ge__ = _fail_with_undefined_error
    __int__ = __float__ = __complex__ = _fail_with_undefined_error
    __pow__ = __rpow__ = _fail_with_undefined_error

    def __str__(self) -> str:
        # Printing is the moment an undefined "reaches output"; only strict mode objects.
        # bool(), `is defined`, `default()` and iteration stay lenient in every mode.
        if _STRICT.get():
            self._fail_with_undefined_error()
        return ""


# --------------------------------------------------------------------------------------------
# Environment


class _Environment(SandboxedEnvironment):
    """The sandbox plus the DSL's lookup rules (9.2)."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, LoopResult):
            if attribute in ("results", "data"):
                return obj
            if attribute == "stats":
                return obj.stats
        elif isinstance(obj, Mapping):
            # Data beats methods: `{{ start.items }}` is the key `items`, not dict.items.
            try:
                return obj[attribute]
            except (KeyError, TypeError):
                pass
            # `.data` alias: results written for the envelope shape (`x.data.field`) work
            # on plain results. Attribute-style only, so `x['data']` stays a real lookup.
            if attribute == "data":
                return obj
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        # Subscription keeps Jinja's sandboxed order (item first, then a safe attribute);
        # LoopResult answers its string keys itself. No `.data` alias here, by design.
        return super().getitem(obj, argument)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        # The stock sandbox returns an undefined that prints as '' - an escape attempt
        # would go unnoticed. Fail loudly instead, in every mode.
        raise SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )


def _json_default(value: Any) -> Any:
    if isinstance(value, Undefined):
        str(value)  # raises in strict mode: the undefined is being printed
        return None
    return str(value)


def _tojson(value: Any, indent: int | None = None) -> str:
    # Not Jinja's HTML-safe variant: output goes to tools, not browsers, so `<`, `&` and
    # non-ASCII text must come out as written.
    return json.dumps(value, ensure_ascii=False, default=_json_default, indent=indent)


def _fromjson(value: Any) -> Any:
    # Rendered fields are already coerced, so a "JSON string" often arrives parsed; and an
    # undefined passes through so `x | fromjson | default({})` still works.
    if isinstance(value, (str, bytes, bytearray)):
        return json.loads(value)
    return value


def _b64encode(value: Any) -> str:
    raw = bytes(value) if isinstance(value, (bytes, bytearray)) else str(value).encode("utf-8")
    return base64.b64encode(raw).decode("ascii")


def _b64decode(value: Any) -> str:
    raw = bytes(value) if isinstance(value, (bytes, bytearray)) else str(value).encode("ascii")
    return base64.b64decode(raw).decode("utf-8")


_ENV = _Environment(autoescape=False, undefined=_Undefined)
_ENV.filters.update(
    tojson=_tojson, fromjson=_fromjson, b64encode=_b64encode, b64decode=_b64decode
)
# Merged under each render's context (later wins) so `range`, `dict`, `namespace` resolve.
_GLOBALS: dict[str, Any] = dict(_ENV.globals)


# --------------------------------------------------------------------------------------------
# Compilation cache

# Exactly one `{{ expr }}`: its value is returned natively (9.3). Greedy so that `}}` inside
# a literal (`{{ {'a': {'b': 1}} }}`) stays in the expression; `{{ a }} x {{ b }}` is
# rejected by the "no other marker" check below.
_SINGLE_EXPR = re.compile(r"\s*\{\{(.*)\}\}\s*", re.DOTALL)


class _Compiled:
    """One cached source string: an expression or a text template, or its compile error."""

    __slots__ = ("error", "is_expr", "name", "needs_scrub", "template")

    def __init__(
        self,
        template: Any = None,
        *,
        is_expr: bool = False,
        needs_scrub: bool = False,
        error: Exception | None = None,
        name: str | None = None,
    ) -> None:
        self.template = template
        self.is_expr = is_expr
        # False when the expression is a plain path (`a.b['c']`): its value comes straight
        # from the context and cannot contain undefineds, so the result walk is skipped.
        self.needs_scrub = needs_scrub
        self.error = error
        self.name = name
        """`{{ name }}` alone: looked up directly when the context has it (the commonest
        template, e.g. a previous step's result); Jinja compiles it only for the rest."""


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JINJA_WORDS = frozenset({"true", "false", "none", "True", "False", "None", "and", "or", "not",
                          "in", "is", "if", "else", "for", "recursive", "import", "from",
                          "with", "without", "context", "as", "block", "endblock"})  # fmt: skip
_MISSING = object()


_cache: dict[str, _Compiled] = {}
_stats = {"hits": 0, "misses": 0}


def _is_path(node: nodes.Node) -> bool:
    if isinstance(node, (nodes.Name, nodes.Const)):
        return True
    if isinstance(node, nodes.Getattr):
        return _is_path(node.node)
    if isinstance(node, nodes.Getitem):
        return isinstance(node.arg, nodes.Const) and _is_path(node.node)
    return False


def _compile_expression(source: str) -> _Compiled:
    # Environment.compile_expression minus its traceback rewriting, keeping the parsed node
    # so the path check can inspect it.
    parser = Parser(_ENV, source, state="variable")
    expr = parser.parse_expression()
    if not parser.stream.eos:
        raise TemplateSyntaxError("chunk after expression", parser.stream.current.lineno)
    expr.set_environment(_ENV)
    body = [nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)]
    template = _ENV.from_string(nodes.Template(body, lineno=1))
    return _Compiled(template, is_expr=True, needs_scrub=not _is_path(expr))


def _plain_name(inner: str) -> str | None:
    """The name, when the expression of a `{{ ... }}` template is one plain name."""
    name = inner.strip()
    return name if _NAME.fullmatch(name) and name not in _JINJA_WORDS else None


def _compile(source: str) -> _Compiled:
    match = _SINGLE_EXPR.fullmatch(source)
    if match is not None:
        inner = match.group(1)
        name = _plain_name(inner)
        if name is not None:
            return _Compiled(is_expr=True, name=name)  # compiled on first need (`_full`)
        if "{{" not in inner and "{%" not in inner:
            # Whitespace-control markers (`{{- x -}}`) belong to the tag, not the expression.
            if inner[:1] in ("-", "+"):
                inner = inner[1:]
            if inner.endswith("-"):
                inner = inner[:-1]
            try:
                return _compile_expression(inner)
            except TemplateSyntaxError:
                pass  # e.g. `{{ a }} b }}`: Jinja reads that as a text template; so do we
    try:
        return _Compiled(_ENV.from_string(source))
    except TemplateSyntaxError as exc:
        return _Compiled(error=exc)


def _lookup(source: str) -> _Compiled:
    compiled = _cache.get(source)
    if compiled is not None:
        _stats["hits"] += 1
        return compiled
    _stats["misses"] += 1
    compiled = _compile(source)
    if len(_cache) >= _CACHE_MAX:
        # FIFO eviction: cheap, and the working set of a run is far below the bound.
        # Another thread may evict concurrently; the bound is approximate.
        with contextlib.suppress(StopIteration, KeyError, RuntimeError):
            del _cache[next(iter(_cache))]
    _cache[source] = compiled
    return compiled


def compile_cache_info() -> dict[str, int]:
    """Cache statistics: size, max_size, hits, misses."""
    return {"size": len(_cache), "max_size": _CACHE_MAX, **_stats}


# --------------------------------------------------------------------------------------------
# Coercion (9.3)

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


# --------------------------------------------------------------------------------------------
# Rendering

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


@functools.lru_cache(maxsize=_CACHE_MAX)
def _names_in(source: str) -> frozenset[str] | None:
    match = _SINGLE_EXPR.fullmatch(source)
    name = None if match is None else _plain_name(match.group(1))
    if name is not None:
        return frozenset((name,))
    try:
        return frozenset(meta.find_undeclared_variables(_ENV.parse(source)))
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
    return UndefinedValue(message, where=where, name=None if name is None else str(name),
                          template=template)


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
    return TemplateError(f"{where}: {detail} in '{_shorten(template)}'", where=where,
                         template=template)


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


def _full(compiled: _Compiled) -> _Compiled:
    """A plain-name template compiled by Jinja (for a name the context lacks)."""
    if compiled.template is None and compiled.name is not None:
        compiled.template = _compile_expression(compiled.name).template
    return compiled


def _render_str(text: str, context: Mapping[str, Any], where: str, mode: _RenderMode) -> Any:
    compiled = _lookup(text)
    if compiled.name is not None:
        value = context.get(compiled.name, _MISSING)
        if value is _MISSING:
            value = _GLOBALS.get(compiled.name, _MISSING)
        if value is not _MISSING:
            # what Jinja would give: a plain path needs no scrub, text is coerced
            return coerce(value) if isinstance(value, str) else value
        compiled = _full(compiled)  # undefined: Jinja's own error and `set`-mode handling
    if compiled.error is not None:
        raise _template_error(where, text, compiled.error)
    template = compiled.template
    strict = mode == "strict"
    token = _STRICT.set(True) if strict else None
    try:
        # shared=True: the merged dict below is already private to this render, so Jinja
        # need not copy it again.
        ctx = template.new_context({**_GLOBALS, **context}, shared=True)
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
            _STRICT.reset(token)
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
