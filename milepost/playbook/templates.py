"""The template environment of playbooks (DSL 9.2) and its compilation cache.

Design notes:
- One module-level `SandboxedEnvironment`: playbooks are user-supplied, so templates must not
  reach Python internals (`''.__class__.__mro__`); unsafe attribute access raises at once
  instead of the sandbox's default of silently yielding an undefined.
- Compiled templates and expressions are cached by source string: the same handful of
  templates is rendered thousands of times per run, and compiling is ~100x rendering.
- How an undefined value is treated depends on the *mode* of the render, but the Undefined
  class is fixed per environment. The strict mode is therefore signalled through a
  `ContextVar` (`STRICT`) that `_Undefined.__str__` consults, so one environment and one
  cache serve all modes (and concurrent renders in other threads are unaffected).
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, NoReturn

from jinja2 import nodes
from jinja2.exceptions import SecurityError, TemplateSyntaxError, UndefinedError
from jinja2.parser import Parser
from jinja2.runtime import ChainableUndefined, Undefined
from jinja2.sandbox import SandboxedEnvironment

from milepost.playbook.loop_result import LoopResult

CACHE_MAX = 4096


# --------------------------------------------------------------------------------------------
# Undefined handling

# True while a strict-mode render runs in this thread/task (see module docstring).
STRICT: ContextVar[bool] = ContextVar("milepost_render_strict", default=False)


class UndefinedNameError(UndefinedError):
    """An undefined value was used; carries the name so the message can cite it."""

    def __init__(self, message: str, name: object) -> None:
        super().__init__(message)
        self.name = name


class _Undefined(ChainableUndefined):
    """Falsy, chainable (`a.b.c` stays undefined), printable as '' except in strict mode.

    Every failing operation raises `UndefinedNameError` so the caller can recover the name.
    The operator dunders are re-bound here because in `Undefined` they point at the base
    class's function object, which an override of `_fail_with_undefined_error` would not
    reach.
    """

    __slots__ = ()

    def _fail_with_undefined_error(self, *args: Any, **kwargs: Any) -> NoReturn:
        if self._undefined_exception is not UndefinedError:
            raise self._undefined_exception(self._undefined_message)
        raise UndefinedNameError(self._undefined_message, self._undefined_name)

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
        if STRICT.get():
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


ENV = _Environment(autoescape=False, undefined=_Undefined)
ENV.filters.update(tojson=_tojson, fromjson=_fromjson, b64encode=_b64encode, b64decode=_b64decode)
# Merged under each render's context (later wins) so `range`, `dict`, `namespace` resolve.
GLOBALS: dict[str, Any] = dict(ENV.globals)


# --------------------------------------------------------------------------------------------
# Compilation cache

# Exactly one `{{ expr }}`: its value is returned natively (9.3). Greedy so that `}}` inside
# a literal (`{{ {'a': {'b': 1}} }}`) stays in the expression; `{{ a }} x {{ b }}` is
# rejected by the "no other marker" check below.
SINGLE_EXPR = re.compile(r"\s*\{\{(.*)\}\}\s*", re.DOTALL)


class Compiled:
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
_JINJA_WORDS = frozenset(
    {
        "true",
        "false",
        "none",
        "True",
        "False",
        "None",
        "and",
        "or",
        "not",
        "in",
        "is",
        "if",
        "else",
        "for",
        "recursive",
        "import",
        "from",
        "with",
        "without",
        "context",
        "as",
        "block",
        "endblock",
    }
)
_cache: dict[str, Compiled] = {}
_stats = {"hits": 0, "misses": 0}


def _is_path(node: nodes.Node) -> bool:
    if isinstance(node, (nodes.Name, nodes.Const)):
        return True
    if isinstance(node, nodes.Getattr):
        return _is_path(node.node)
    if isinstance(node, nodes.Getitem):
        return isinstance(node.arg, nodes.Const) and _is_path(node.node)
    return False


def compile_expression(source: str) -> Compiled:
    # Environment.compile_expression minus its traceback rewriting, keeping the parsed node
    # so the path check can inspect it.
    parser = Parser(ENV, source, state="variable")
    expr = parser.parse_expression()
    if not parser.stream.eos:
        raise TemplateSyntaxError("chunk after expression", parser.stream.current.lineno)
    expr.set_environment(ENV)
    body = [nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)]
    template = ENV.from_string(nodes.Template(body, lineno=1))
    return Compiled(template, is_expr=True, needs_scrub=not _is_path(expr))


def plain_name(inner: str) -> str | None:
    """The name, when the expression of a `{{ ... }}` template is one plain name."""
    name = inner.strip()
    return name if _NAME.fullmatch(name) and name not in _JINJA_WORDS else None


def _compile(source: str) -> Compiled:
    match = SINGLE_EXPR.fullmatch(source)
    if match is not None:
        inner = match.group(1)
        name = plain_name(inner)
        if name is not None:
            return Compiled(is_expr=True, name=name)  # compiled on first need (`_full`)
        if "{{" not in inner and "{%" not in inner:
            # Whitespace-control markers (`{{- x -}}`) belong to the tag, not the expression.
            if inner[:1] in ("-", "+"):
                inner = inner[1:]
            if inner.endswith("-"):
                inner = inner[:-1]
            try:
                return compile_expression(inner)
            except TemplateSyntaxError:
                pass  # e.g. `{{ a }} b }}`: Jinja reads that as a text template; so do we
    try:
        return Compiled(ENV.from_string(source))
    except TemplateSyntaxError as exc:
        return Compiled(error=exc)


def lookup(source: str) -> Compiled:
    compiled = _cache.get(source)
    if compiled is not None:
        _stats["hits"] += 1
        return compiled
    _stats["misses"] += 1
    compiled = _compile(source)
    if len(_cache) >= CACHE_MAX:
        # FIFO eviction: cheap, and the working set of a run is far below the bound.
        # Another thread may evict concurrently; the bound is approximate.
        with contextlib.suppress(StopIteration, KeyError, RuntimeError):
            del _cache[next(iter(_cache))]
    _cache[source] = compiled
    return compiled


def compile_cache_info() -> dict[str, int]:
    """Cache statistics: size, max_size, hits, misses."""
    return {"size": len(_cache), "max_size": CACHE_MAX, **_stats}
