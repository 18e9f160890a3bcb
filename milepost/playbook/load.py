"""YAML -> validated, normalized `Playbook` (DSL.md sections 1-11).

`load_file`/`load_text` parse with PyYAML safe loading and remember the line of every
mapping key and sequence item, so each message can end in `(line N)`. `load_data` checks
the whole document, rewrites legacy forms (with a warning naming the step) and raises one
`PlaybookInvalid` listing every problem. Warnings end up in `Playbook.warnings` and in the
log; they are never raised through `warnings.warn`.

Messages read `<scope>: <field path>: <text> (line N)`, where the scope is `step 'x'`,
`workbook 'x'` or absent at the root: `step 'fetch': next.arcs[1].step: unknown step
'fetch_pgae' (line 42)`.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from milepost.errors import PlaybookInvalid
from milepost.playbook import model

logger = logging.getLogger(__name__)

API_VERSION = "noetl.io/v2"
TOOL_KINDS = ("python", "http", "postgres", "duckdb", "shell", "noop", "workbook", "playbook")
"""Tool kinds milepost runs (DSL 3)."""

LinePath = tuple[str | int, ...]
_Show = Literal["field", "parent", "none"]
_M = TypeVar("_M", bound=BaseModel)

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_APPROVER_RE = re.compile(r"^(user|role):\S+$")
_BACKOFFS = ("none", "fixed", "linear", "exponential")
_ACTIONS = ("continue", "retry", "jump", "break", "fail")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_ROOT_KEYS = _words("apiVersion kind metadata workload keychain executor workbook workflow")
_STEP_KEYS = _words("step desc input tool loop set next spec output")
_REJECTED = {
    "case": "`case:` is not supported: routing belongs in `next.arcs`, result handling "
    "in `tool.spec.policy.rules`",
    "vars": "`vars:` is not supported: use `set: {ctx.<name>: ...}`",
    "sink": "`sink:` is not supported: add a storage task (e.g. kind: postgres) to the pipeline",
    "save": "`save:` is not supported: add a storage task (e.g. kind: postgres) to the pipeline",
    "retry": "`retry:` is not supported here: use a policy rule "
    "(`tool.spec.policy.rules` with `do: retry`) or step `spec.retry`",
    "eval": "`eval:` is not supported: use policy rules (`tool.spec.policy.rules[].when`)",
    "expr": "`expr:` is not supported: use policy rules (`tool.spec.policy.rules[].when`)",
}
_TOOL_FIELD_HINTS = _words(
    "kind code libs script command query url endpoint method headers params json body auth "
    "database schema path cwd env return_step return_result result_step"
)
_STEP_KEY_HINTS = {
    "name": "did you mean step?",
    "when": "conditions belong in next.arcs[].when or spec.policy.admit",
    "description": "did you mean desc?",
}
_REQUIRED_TOOL_FIELDS: dict[str, tuple[str, ...]] = {
    "python": ("code",),
    "http": ("url",),
    "postgres": ("command", "query"),
    "duckdb": ("query", "command"),
    "shell": ("command",),
    "workbook": ("name",),
    "playbook": ("path",),
}
_IGNORED_TOOL_FIELDS = _words("pool assert task")
_STEP_SPEC_KEYS = _words("timeout retry liveness approval compensation policy")
_RETRY_KEYS = _words("max_attempts backoff delay max_delay retry_on")
_APPROVAL_KEYS = _words("required approvers quorum expires_in allow_self_approval policy risk")
_THEN_KEYS = _words("do attempts backoff delay to set")
_EXECUTOR_SPEC_KEYS = _words("entry_step no_next_is_error timeout retry liveness cancel_grace")


# --------------------------------------------------------------------------- public API


def load_file(path: str | Path) -> model.Playbook:
    """Load and validate the playbook stored at `path`.

    Raises:
        PlaybookInvalid: listing every problem found (the file's path is the source).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaybookInvalid([f"cannot read {p}: {exc}"], str(p)) from exc
    return load_text(text, source=str(p))


def load_text(text: str, source: str | None = None) -> model.Playbook:
    """Parse YAML `text` (safe loading) and validate it like `load_data`."""
    data, lines, problems = _parse_yaml(text)
    if data is None and problems:
        raise PlaybookInvalid(problems, source)
    return _Loader(source, lines, problems).load(data)


def load_data(
    data: Any, source: str | None = None, lines: dict[tuple[Any, ...], int] | None = None
) -> model.Playbook:
    """Validate and normalize an already parsed playbook.

    Args:
        data: the parsed document (a mapping).
        source: where it came from, for messages.
        lines: optional `path tuple -> line` map (`('workflow', 2, 'tool')`) for messages.

    Raises:
        PlaybookInvalid: listing every problem found.
    """
    return _Loader(source, lines or {}, []).load(data)


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_RE = re.compile(r"(?:\d+(?:\.\d+)?\s*(?:ms|s|m|h|d)\s*)+")
_DURATION_PART_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_NUMBER_RE = re.compile(r"\d+(?:\.\d*)?|\.\d+")


def parse_duration(value: Any, where: str) -> float:
    """Seconds in `value`: `30s`, `5m`, `2h`, `1d`, `500ms`, `1h30m`, or a plain number.

    Raises:
        ValueError: `"<where>: invalid duration ..."` when `value` is not a duration.
    """
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if _NUMBER_RE.fullmatch(text):
            seconds = float(text)
        elif _DURATION_RE.fullmatch(text):
            seconds = sum(
                float(n) * _DURATION_UNITS[unit] for n, unit in _DURATION_PART_RE.findall(text)
            )
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        prefix = f"{where}: " if where else ""
        raise ValueError(
            f"{prefix}invalid duration {value!r} "
            "(expected e.g. 30s, 5m, 2h, 1d or a number of seconds)"
        )
    return seconds


# --------------------------------------------------------------------------- YAML + lines


class _KeyConstructor(yaml.constructor.SafeConstructor):
    """Builds mapping keys on their own, to name paths while walking the node tree."""


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _parse_yaml(text: str) -> tuple[Any, dict[LinePath, int], list[str]]:
    """Return (data, lines, problems); data is None after a syntax error."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        lines: dict[LinePath, int] = {}
        problems: list[str] = []
        if node is not None:
            _record_lines(node, (), lines, problems, _KeyConstructor(), set())
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc)
        return None, {}, [f"invalid YAML: {reason}{where}"]
    finally:
        loader.dispose()
    if node is None:
        return None, {}, ["the document is empty"]
    return data, lines, problems


def _record_lines(
    node: yaml.Node,
    path: LinePath,
    lines: dict[LinePath, int],
    problems: list[str],
    keys: _KeyConstructor,
    active: set[int],
) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if id(node) in active:  # a recursive alias
        return
    active.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _record_lines(item, (*path, i), lines, problems, keys, active)
    elif isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = keys.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                where = f"{_fmt_path(path)}: " if path else ""
                problems.append(f"{where}duplicate key {key!r} (line {line})")
            seen.add(key)
            lines.setdefault((*path, key), line)
            _record_lines(value_node, (*path, key), lines, problems, keys, active)
    active.discard(id(node))


# --------------------------------------------------------------------------- messages


def _fmt_path(path: Iterable[str | int]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


@dataclass
class _Report:
    lines: dict[tuple[Any, ...], int]
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def line(self, path: LinePath) -> int | None:
        for end in range(len(path), 0, -1):
            found = self.lines.get(path[:end])
            if found is not None:
                return found
        return None

    def add(self, target: list[str], where: _Where, msg: str, show: _Show) -> None:
        parts = [where.label] if where.label else []
        shown = {"field": where.rel, "parent": where.rel[:-1], "none": ()}[show]
        if shown:
            parts.append(_fmt_path(shown))
        parts.append(msg)
        text = ": ".join(parts)
        line = self.line(where.base + where.rel)
        if line is not None:
            text += f" (line {line})"
        target.append(text)


@dataclass(frozen=True)
class _Where:
    """A place in the document: a scope (`step 'x'`) plus a field path inside it."""

    report: _Report
    label: str | None
    base: LinePath
    rel: LinePath = ()

    def __truediv__(self, key: str | int) -> _Where:
        return replace(self, rel=(*self.rel, key))

    def error(self, msg: str, *, show: _Show = "field") -> None:
        """Record a problem; `show` picks the path printed: this field, its parent or none
        (the line is always this field's)."""
        self.report.add(self.report.problems, self, msg, show)

    def warn(self, msg: str, *, show: _Show = "field") -> None:
        self.report.add(self.report.warnings, self, msg, show)

    def alias_line(self, other: _Where) -> None:
        """Let this (rewritten) place report the line of `other`."""
        line = self.report.line(other.base + other.rel)
        if line is not None:
            self.report.lines.setdefault(self.base + self.rel, line)


# --------------------------------------------------------------------------- small checks


def _mapping(raw: Any, w: _Where) -> dict[str, Any]:
    """`raw` as a mapping with string keys (null -> {}); otherwise a problem and {}."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        w.error(f"expected a mapping, got {_type_name(raw)}")
        return {}
    bad = [k for k in raw if not isinstance(k, str)]
    for key in bad:
        w.error(f"keys must be strings, got {key!r}")
    return {k: v for k, v in raw.items() if isinstance(k, str)}


def _check_keys(raw: dict[str, Any], w: _Where, allowed: Iterable[str]) -> None:
    allowed = frozenset(allowed)
    for key in raw:
        if key not in allowed:
            (w / key).error(
                f"unknown field {key!r} (expected one of: {', '.join(sorted(allowed))})",
                show="parent",
            )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def _condition(raw: Any, w: _Where) -> Any:
    """A `when`: a template string or a YAML boolean."""
    if isinstance(raw, bool | str):
        return raw
    w.error(f"expected a template string or a boolean, got {_type_name(raw)}")
    return None


def _duration(raw: Any, w: _Where, *, positive: bool = True) -> float | None:
    try:
        seconds = parse_duration(raw, "")
    except ValueError as exc:
        w.error(str(exc))
        return None
    if positive and seconds <= 0:
        w.error(f"must be greater than 0, got {raw!r}")
        return None
    return seconds


def _dur_text(raw: Any) -> str:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return f"{raw:g}s"
    return str(raw)


def _count(raw: Any, w: _Where, minimum: int = 1) -> int | None:
    if _is_int(raw) and raw >= minimum:
        return int(raw)
    w.error(f"expected an integer >= {minimum}, got {raw!r}")
    return None


def _choice(raw: Any, w: _Where, choices: Iterable[str]) -> str | None:
    choices = tuple(choices)
    if isinstance(raw, str) and raw in choices:
        return raw
    w.error(f"expected one of {', '.join(choices)}, got {raw!r}")
    return None


def _name(raw: Any, w: _Where, what: str) -> str | None:
    if not isinstance(raw, str) or not _NAME_RE.match(raw):
        w.error(f"invalid {what} name {raw!r} (letters, digits and _, not starting with a digit)")
        return None
    if raw in model.RESERVED_NAMES:
        w.error(f"{what} name {raw!r} is reserved")
        return None
    return raw


def _set_block(raw: Any, w: _Where, *, bare_ok: bool) -> dict[str, Any]:
    """A `set` mapping. Step and arc sets write `ctx.*` only; task and policy sets also
    `iter.*`, `step.*` and bare (pipeline-local) keys."""
    values = _mapping(raw, w)
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


def _build(w: _Where, factory: type[_M], /, **kwargs: Any) -> _M | None:
    """Construct a model; a validation error (a gap in the checks above) becomes a problem."""
    try:
        return factory(**kwargs)
    except ValidationError as exc:
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            w.error(f"{loc}: {err['msg']}" if loc else err["msg"])
        return None


# --------------------------------------------------------------------------- the loader


_REPORTED = object()
"""Stands for a tool whose problem is already reported."""


@dataclass
class _StepGraph:
    arcs: dict[str, list[str]] = field(default_factory=dict)
    compensation: dict[str, tuple[str, _Where]] = field(default_factory=dict)


class _Loader:
    def __init__(
        self, source: str | None, lines: dict[tuple[Any, ...], int], problems: list[str]
    ) -> None:
        self.source = source
        self.report = _Report(dict(lines), list(problems))
        self.root = _Where(self.report, None, ())
        self.step_names: set[str] = set()
        self.workbook_names: set[str] = set()
        self.executor = model.ExecutorSpec()
        self.executor_raw: dict[str, Any] = {}
        self.graph = _StepGraph()

    # ---- document

    def load(self, data: Any) -> model.Playbook:
        if not isinstance(data, dict):
            self.root.error(f"a playbook must be a mapping, got {_type_name(data)}")
            self._raise()
        doc = _mapping(data, self.root)
        self._root_keys(doc)
        metadata = self._metadata(doc.get("metadata"), self.root / "metadata", "metadata" in doc)
        workload = _mapping(doc.get("workload"), self.root / "workload")
        self.executor = self._executor(doc.get("executor"), self.root / "executor")
        keychain = self._keychain(doc.get("keychain"), self.root / "keychain")
        raw_steps = self._collect_steps(doc, self.root / "workflow")
        workbook = self._workbook(doc.get("workbook"), self.root / "workbook")
        steps: dict[str, model.Step] = {}
        for name, raw, w in raw_steps:
            step = self._step(raw, w, name)
            if step is not None:
                steps[name] = step
        entry = self._entry_step(raw_steps)
        joins, reaches = self._graph_checks(entry, raw_steps)
        if self.report.problems:
            self._raise()
        for text in self.report.warnings:
            logger.info("playbook %s: %s", self.source or metadata.get("name"), text)
        playbook = _build(
            self.root,
            model.Playbook,
            metadata=metadata,
            workload=workload,
            keychain=keychain,
            executor=self.executor,
            workbook=workbook,
            steps=steps,
            entry_step=entry,
            joins=joins,
            reaches=reaches,
            warnings=tuple(self.report.warnings),
            source=self.source,
        )
        if playbook is None:
            self._raise()
        return playbook

    def _raise(self) -> NoReturn:
        raise PlaybookInvalid(list(self.report.problems), self.source)

    def _root_keys(self, doc: dict[str, Any]) -> None:
        version = doc.get("apiVersion")
        if "apiVersion" not in doc:
            self.root.error("field 'apiVersion' is required")
        elif version != API_VERSION:
            (self.root / "apiVersion").error(f"expected {API_VERSION!r}, got {version!r}")
        if "kind" in doc and doc["kind"] != "Playbook":
            (self.root / "kind").error(f"expected 'Playbook', got {doc['kind']!r}")
        for key in doc:
            if key in _ROOT_KEYS:
                continue
            w = self.root / key
            if key in _REJECTED:
                w.error(_REJECTED[key], show="parent")
            else:
                w.error(f"unknown field {key!r}", show="parent")

    def _metadata(self, raw: Any, w: _Where, present: bool) -> dict[str, Any]:
        if not present:
            self.root.error("field 'metadata' is required")
            return {"name": "?", "path": "?"}
        meta = _mapping(raw, w)
        name = meta.get("name")
        if not isinstance(raw, dict):
            name = "?"
        elif name is None:
            w.error("field 'name' is required")
            name = "?"
        elif not isinstance(name, str) or not name.strip():
            (w / "name").error(f"expected a non-empty string, got {name!r}")
            name = "?"
        path = meta.get("path", name)
        if not isinstance(path, str) or not path.strip():
            (w / "path").error(f"expected a non-empty string, got {path!r}")
            path = name
        return {**meta, "name": name, "path": path}

    def _executor(self, raw: Any, w: _Where) -> model.ExecutorSpec:
        spec = _mapping(_mapping(raw, w).get("spec"), w / "spec")
        w = w / "spec"
        self.executor_raw = spec
        for key in spec:
            if key not in _EXECUTOR_SPEC_KEYS:
                (w / key).warn(f"field {key!r} is ignored", show="parent")
        kwargs: dict[str, Any] = {}
        entry = spec.get("entry_step")
        if entry is not None:
            if isinstance(entry, str):
                kwargs["entry_step"] = entry
            else:
                (w / "entry_step").error(f"expected a step name, got {_type_name(entry)}")
        if "no_next_is_error" in spec:
            if isinstance(spec["no_next_is_error"], bool):
                kwargs["no_next_is_error"] = spec["no_next_is_error"]
            else:
                (w / "no_next_is_error").error("expected a boolean")
        for key in ("timeout", "liveness"):
            if spec.get(key) is not None:
                kwargs[key] = _duration(spec[key], w / key)
        if spec.get("cancel_grace") is not None:
            grace = _duration(spec["cancel_grace"], w / "cancel_grace", positive=False)
            if grace is not None:
                kwargs["cancel_grace"] = grace
        if spec.get("retry") is not None:
            kwargs["retry"] = self._retry(spec["retry"], w / "retry")
        liveness, timeout = kwargs.get("liveness"), kwargs.get("timeout")
        if liveness is not None and timeout is not None and liveness <= timeout:
            (w / "liveness").error(
                f"executor.spec.liveness ({_dur_text(spec['liveness'])}) must be greater than "
                f"executor.spec.timeout ({_dur_text(spec['timeout'])})",
                show="none",
            )
        return _build(w, model.ExecutorSpec, **kwargs) or model.ExecutorSpec()

    def _keychain(self, raw: Any, w: _Where) -> tuple[model.KeychainEntry, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, list):
            w.error(f"expected a list, got {_type_name(raw)}")
            return ()
        entries: list[model.KeychainEntry] = []
        seen: set[str] = set()
        for i, item in enumerate(raw):
            entry = self._keychain_entry(_mapping(item, w / i), w / i, seen)
            if entry is not None:
                entries.append(entry)
        return tuple(entries)

    def _keychain_entry(
        self, item: dict[str, Any], w: _Where, seen: set[str]
    ) -> model.KeychainEntry | None:
        name = _name(item.get("name"), w / "name", "keychain")
        if name in seen:
            (w / "name").error(f"duplicate keychain name {name!r}")
        seen.add(name or "")
        needs = {"credential": "credential", "static": "map", "bearer": "token"}
        kind = _choice(item.get("kind"), w / "kind", needs)
        if kind is None or name is None:
            return None
        if item.get(needs[kind]) is None:
            w.error(f"field {needs[kind]!r} is required for kind {kind!r}")
            return None
        for key in item:
            if key not in ("name", "kind", needs[kind]):
                (w / key).warn(f"field {key!r} is ignored", show="parent")
        value = item[needs[kind]]
        if kind == "credential" and not isinstance(value, str):
            (w / "credential").error("expected a credential name")
            return None
        if kind == "static":
            value = _mapping(value, w / "map")
        return _build(w, model.KeychainEntry, name=name, kind=kind, **{needs[kind]: value})

    # ---- workflow

    def _collect_steps(
        self, doc: dict[str, Any], w: _Where
    ) -> list[tuple[str, dict[str, Any], _Where]]:
        """First pass over `workflow`: names (unique, valid) so arcs can be checked."""
        raw = doc.get("workflow")
        if "workflow" not in doc:
            self.root.error("field 'workflow' is required")
            return []
        if not isinstance(raw, list) or not raw:
            w.error(f"expected a non-empty list of steps, got {_type_name(raw)}")
            return []
        out: list[tuple[str, dict[str, Any], _Where]] = []
        first_line: dict[str, int | None] = {}
        for i, item in enumerate(raw):
            iw = w / i
            if not isinstance(item, dict):
                iw.error(f"a step must be a mapping, got {_type_name(item)}")
                continue
            if "step" not in item:
                iw.error("field 'step' is required")
                continue
            name = _name(item["step"], iw / "step", "step")
            if name is None:
                continue
            sw = _Where(self.report, f"step {name!r}", (*iw.base, *iw.rel))
            if name in first_line:
                where = f" (first defined at line {first_line[name]})" if first_line[name] else ""
                sw.error(f"duplicate step name{where}")
                continue
            first_line[name] = self.report.line(sw.base)
            out.append((name, _mapping(item, sw), sw))
        self.step_names = {name for name, _, _ in out}
        return out

    def _step(self, raw: dict[str, Any], w: _Where, name: str) -> model.Step | None:
        self._step_keys(raw, w)
        tool_raw, tool_w = self._tool_source(raw, w)
        tasks, pipeline = self._tools(tool_raw, tool_w, name)
        desc = raw.get("desc")
        if desc is not None and not isinstance(desc, str):
            (w / "desc").error(f"expected a string, got {_type_name(desc)}")
            desc = None
        if "output" in raw:
            (w / "output").warn("field 'output' is ignored", show="parent")
        input_ = self._step_input(raw, w)
        loop = self._loop(raw["loop"], w / "loop") if raw.get("loop") is not None else None
        next_ = self._next(raw.get("next"), w / "next", name)
        spec = self._step_spec(raw.get("spec"), w / "spec", name)
        return _build(
            w,
            model.Step,
            name=name,
            desc=desc,
            input=input_,
            tasks=tasks,
            pipeline=pipeline,
            loop=loop,
            set=_set_block(raw.get("set"), w / "set", bare_ok=False),
            next=next_,
            spec=spec,
        )

    def _step_keys(self, raw: dict[str, Any], w: _Where) -> None:
        legacy_python = raw.get("type") == "python" or raw.get("tool") == "python"
        for key in raw:
            kw = w / key
            if key in _STEP_KEYS or key in ("args", "data", "type"):
                continue
            if key in ("code", "libs") and legacy_python:
                continue
            if key in _REJECTED:
                kw.error(_REJECTED[key], show="parent")
            elif key in _TOOL_FIELD_HINTS:
                kw.error(f"unknown field {key!r} (did you mean tool.{key}?)", show="parent")
            elif key in _STEP_KEY_HINTS:
                kw.error(f"unknown field {key!r} ({_STEP_KEY_HINTS[key]})", show="parent")
            else:
                kw.error(f"unknown field {key!r}", show="parent")

    def _step_input(self, raw: dict[str, Any], w: _Where) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for legacy in ("args", "data"):
            if legacy in raw:
                (w / legacy).warn(f"step {legacy!r} is deprecated: use 'input'", show="parent")
                merged.update(_mapping(raw[legacy], w / legacy))
        merged.update(_mapping(raw.get("input"), w / "input"))
        return merged

    def _tool_source(self, raw: dict[str, Any], w: _Where) -> tuple[Any, _Where]:
        """The step's tool, after the legacy python rewrites of DSL 11."""
        tool = raw.get("tool")
        tw = w / "tool"
        if "type" in raw:
            if raw["type"] != "python":
                (w / "type").error(
                    f"unknown field 'type' (use tool: {{kind: {raw['type']}, ...}})",
                    show="parent",
                )
                return (tool if "tool" in raw else _REPORTED), tw
            if "tool" in raw:
                (w / "type").error("legacy 'type: python' cannot be combined with 'tool'")
                return tool, tw
            w.warn("legacy 'type: python' with step-level 'code' rewritten to tool: {kind: python}")
            return self._python_tool(raw, w, w / "type"), tw
        if isinstance(tool, str):
            if tool == "python" and "code" in raw:
                w.warn(
                    "legacy 'tool: python' with step-level 'code' rewritten to tool: {kind: python}"
                )
                return self._python_tool(raw, w, tw), tw
            kinds = f"{{kind: {tool}, ...}}" if tool in TOOL_KINDS else "{kind: ..., ...}"
            tw.error(f"expected a tool mapping such as {kinds} or a list of tasks")
            return _REPORTED, tw
        return tool, tw

    @staticmethod
    def _python_tool(raw: dict[str, Any], w: _Where, origin: _Where) -> dict[str, Any]:
        tool: dict[str, Any] = {"kind": "python"}
        (w / "tool").alias_line(origin)
        for key in ("code", "libs"):
            if key in raw:
                tool[key] = raw[key]
                (w / "tool" / key).alias_line(w / key)
        return tool

    def _tools(self, raw: Any, w: _Where, step: str) -> tuple[tuple[model.Task, ...], bool]:
        if raw is _REPORTED:
            return (), False
        if raw is None:
            replace(w, rel=w.rel[:-1]).error("field 'tool' is required")
            return (), False
        if isinstance(raw, dict):
            task = self._task(_mapping(raw, w), w, step, (step,), single=True)
            return ((task,) if task is not None else ()), False
        if not isinstance(raw, list):
            w.error(f"expected a tool mapping or a list of tasks, got {_type_name(raw)}")
            return (), False
        if not raw:
            w.error("a pipeline needs at least one task")
            return (), True
        named = self._task_names(raw, w)
        names = tuple(n for n, _ in named)
        tasks = [
            self._task(item, w / i, n, names)
            for i, (n, item) in enumerate(named)
            if item is not None
        ]
        return tuple(t for t in tasks if t is not None), True

    def _task_names(self, raw: list[Any], w: _Where) -> list[tuple[str, dict[str, Any] | None]]:
        """Task names of a pipeline (unnamed: `task_<index>`); None marks an unusable item."""
        explicit = {
            i["name"] for i in raw if isinstance(i, dict) and isinstance(i.get("name"), str)
        }
        out: list[tuple[str, dict[str, Any] | None]] = []
        seen: set[str] = set()
        for i, item in enumerate(raw):
            iw = w / i
            if not isinstance(item, dict):
                iw.error(f"a task must be a mapping, got {_type_name(item)}")
                out.append((f"task_{i}", None))
                continue
            if (
                "kind" not in item
                and len(item) == 1
                and isinstance(next(iter(item.values())), dict)
            ):
                key = next(iter(item))
                iw.error(
                    f"task shorthand '- {key}: {{...}}' is not supported: "
                    f"use '- name: {key}' with the tool fields beside it"
                )
                out.append((str(key), None))
                continue
            if "name" in item:
                name = _name(item["name"], iw / "name", "task") or f"task_{i}"
            else:
                name = f"task_{i}"
                while name in explicit or name in seen:
                    name += "_"
            if name in seen:
                (iw / "name").error(f"duplicate task name {name!r}")
            seen.add(name)
            out.append((name, _mapping(item, iw)))
        return out

    # ---- tools

    def _task(
        self,
        raw: dict[str, Any],
        w: _Where,
        name: str,
        task_names: tuple[str, ...],
        *,
        single: bool = False,
    ) -> model.Task | None:
        kind = raw.get("kind")
        if kind is None:
            w.error("field 'kind' is required")
            return None
        if kind not in TOOL_KINDS:
            (w / "kind").error(f"unknown tool kind {kind!r} (known: {', '.join(TOOL_KINDS)})")
            return None
        input_: dict[str, Any] = {}
        if "args" in raw:
            (w / "args").warn("'args' is deprecated: use 'input'", show="parent")
            input_.update(_mapping(raw["args"], w / "args"))
        input_.update(_mapping(raw.get("input"), w / "input"))
        spec = _mapping(raw.get("spec"), w / "spec")
        config = self._tool_config(raw, w, kind, single)
        return _build(
            w,
            model.Task,
            name=name,
            kind=kind,
            input=input_,
            config=config,
            policy=self._policy(spec, w / "spec", task_names),
            set=_set_block(raw.get("set"), w / "set", bare_ok=True),
            timeout=_duration(spec["timeout"], w / "spec" / "timeout")
            if spec.get("timeout") is not None
            else None,
        )

    def _tool_config(
        self, raw: dict[str, Any], w: _Where, kind: str, single: bool
    ) -> dict[str, Any]:
        reserved = {"kind", "input", "args", "set", "spec"}
        if not single or kind != "workbook":
            reserved.add("name")
        config: dict[str, Any] = {}
        for key, value in raw.items():
            if key in reserved:
                continue
            if key in _REJECTED:
                (w / key).error(_REJECTED[key], show="parent")
            elif key in _IGNORED_TOOL_FIELDS:
                (w / key).warn(f"field {key!r} is ignored", show="parent")
            else:
                config[key] = value
        if kind == "workbook" and "name" in raw:
            config["name"] = raw["name"]
        if kind == "http":
            self._http_legacy(config, w)
        elif kind == "python":
            self._python_config(config, w)
        self._required_fields(config, w, kind)
        return config

    @staticmethod
    def _http_legacy(config: dict[str, Any], w: _Where) -> None:
        for old, new in (("endpoint", "url"), ("data", "body")):
            if old not in config:
                continue
            if new in config:
                (w / old).error(f"both {new!r} and its legacy alias {old!r} are given")
                continue
            (w / old).warn(f"{old!r} is deprecated: use {new!r}", show="parent")
            config[new] = config.pop(old)
            (w / new).alias_line(w / old)

    @staticmethod
    def _python_config(config: dict[str, Any], w: _Where) -> None:
        if "script" in config:
            sw = w / "script"
            script = config.pop("script")
            source = script.get("source") if isinstance(script, dict) else None
            if not isinstance(source, dict) or source.get("type") != "inline":
                sw.error("only 'script: {source: {type: inline, code: ...}}' is supported")
                config["script"] = script  # reported: no second "code is required"
            elif "code" in config:
                sw.error("'script' and 'code' cannot both be given")
            elif not isinstance(source.get("code"), str):
                (sw / "source" / "code").error("expected the python code as a string")
            else:
                config["code"] = source["code"]
        if "code" in config and not isinstance(config["code"], str):
            (w / "code").error(f"expected a string, got {_type_name(config['code'])}")
        if "libs" in config:
            libs = _mapping(config["libs"], w / "libs")
            for alias, module in libs.items():
                if not isinstance(module, str) or not alias.isidentifier():
                    (w / "libs" / alias).error("expected 'alias: module.name'")

    def _required_fields(self, config: dict[str, Any], w: _Where, kind: str) -> None:
        needed = _REQUIRED_TOOL_FIELDS.get(kind, ())
        if "script" in config:  # an unsupported python script, already reported
            return
        if needed and all(config.get(f) in (None, "") for f in needed):
            which = " or ".join(repr(f) for f in needed)
            w.error(f"field {which} is required for kind {kind!r}")
            return
        if kind == "workbook":
            entry = config["name"]
            if not isinstance(entry, str) or entry not in self.workbook_names:
                (w / "name").error(f"unknown workbook entry {entry!r}")

    # ---- task policy (DSL 5)

    def _policy(
        self, spec: dict[str, Any], w: _Where, task_names: tuple[str, ...]
    ) -> model.TaskPolicy | None:
        for key in spec:
            if key == "retry":
                (w / key).error(
                    "tool spec.retry is not supported: use a policy rule with 'do: retry', "
                    "or step spec.retry"
                )
            elif key not in ("policy", "timeout"):
                (w / key).warn(f"field {key!r} is ignored", show="parent")
        if spec.get("policy") is None:
            return None
        pw = w / "policy"
        policy = _mapping(spec["policy"], pw)
        _check_keys(policy, pw, ("rules", "on_unmatched"))
        rules_raw = policy.get("rules") or []
        if not isinstance(rules_raw, list):
            (pw / "rules").error(f"expected a list, got {_type_name(rules_raw)}")
            rules_raw = []
        rules = [self._rule(r, pw / "rules" / i, task_names) for i, r in enumerate(rules_raw)]
        on_unmatched = None
        if policy.get("on_unmatched") is not None:
            on_unmatched = _choice(
                policy["on_unmatched"], pw / "on_unmatched", ("continue", "fail")
            )
        return _build(
            pw,
            model.TaskPolicy,
            rules=tuple(r for r in rules if r is not None),
            on_unmatched=on_unmatched,
        )

    def _rule(self, raw: Any, w: _Where, task_names: tuple[str, ...]) -> model.PolicyRule | None:
        rule = _mapping(raw, w)
        if "else" in rule:
            _check_keys(rule, w, ("else",))
            body = _mapping(rule["else"], w / "else")
            if "then" not in body:
                w.warn("policy 'else:' without 'then:' is deprecated: use 'else: {then: {...}}'")
                return self._then_rule(None, body, w / "else", task_names)
            _check_keys(body, w / "else", ("then",))
            return self._then_rule(None, body["then"], w / "else" / "then", task_names)
        _check_keys(rule, w, ("when", "then"))
        if "when" not in rule:
            w.error("a rule needs 'when' (with 'then') or 'else'")
            return None
        when = _condition(rule["when"], w / "when")
        if "then" not in rule:
            w.error("field 'then' is required next to 'when'")
            return None
        return self._then_rule(when, rule["then"], w / "then", task_names)

    def _then_rule(
        self, when: Any, raw: Any, w: _Where, task_names: tuple[str, ...]
    ) -> model.PolicyRule | None:
        then = _mapping(raw, w)
        _check_keys(then, w, _THEN_KEYS)
        kwargs: dict[str, Any] = {}
        do = _choice(then.get("do", "continue"), w / "do", _ACTIONS) or "continue"
        kwargs["do"] = do
        if "attempts" in then:
            kwargs["attempts"] = _count(then["attempts"], w / "attempts") or 3
        if "delay" in then:
            kwargs["delay"] = _duration(then["delay"], w / "delay", positive=False) or 0.0
        if "backoff" in then:
            kwargs["backoff"] = _choice(then["backoff"], w / "backoff", _BACKOFFS) or "none"
        else:
            kwargs["backoff"] = "fixed" if "delay" in then else "none"
        to = then.get("to")
        if do == "jump":
            if to is None:
                w.error("'do: jump' requires 'to' (a task of this pipeline or 'previous')")
            elif to != "previous" and to not in task_names:
                (w / "to").error(
                    f"unknown task {to!r} (tasks: {', '.join(task_names)}, or 'previous')"
                )
            else:
                kwargs["to"] = to
        elif to is not None:
            (w / "to").warn(f"'to' is ignored unless do is 'jump' (do: {do})")
        kwargs["set"] = _set_block(then.get("set"), w / "set", bare_ok=True)
        then_model = _build(w, model.PolicyThen, **kwargs)
        if then_model is None:
            return None
        return _build(w, model.PolicyRule, when=when, then=then_model)

    # ---- loop (DSL 6)

    def _loop(self, raw: Any, w: _Where) -> model.Loop | None:
        loop = _mapping(raw, w)
        if "cursor" in loop:
            (w / "cursor").error("cursor loops are not supported", show="parent")
        hints = {"collection": "in", "element": "iterator"}
        for key in loop:
            if key in hints:
                (w / key).error(f"unknown field {key!r} (did you mean {hints[key]}?)")
            elif key not in ("in", "iterator", "spec", "mode", "max_in_flight", "cursor"):
                (w / key).error(f"unknown field {key!r}", show="parent")
        spec = _mapping(loop.get("spec"), w / "spec")
        _check_keys(spec, w / "spec", ("mode", "max_in_flight"))
        settings: dict[str, Any] = {}
        for key in ("mode", "max_in_flight"):
            if key in loop:
                (w / key).warn(f"{key!r} is deprecated: use loop.spec.{key}", show="parent")
                settings[key] = (loop[key], w / key)
            if key in spec:
                settings[key] = (spec[key], w / "spec" / key)
        kwargs: dict[str, Any] = {}
        if "in" not in loop:
            w.error("field 'in' is required")
        elif not isinstance(loop["in"], str | list):
            (w / "in").error(f"expected a template or a list, got {_type_name(loop['in'])}")
        if "iterator" in loop:
            kwargs["iterator"] = _name(loop["iterator"], w / "iterator", "iterator") or "item"
        if "mode" in settings:
            value, mw = settings["mode"]
            kwargs["mode"] = _choice(value, mw, ("sequential", "parallel")) or "sequential"
        if "max_in_flight" in settings:
            value, mw = settings["max_in_flight"]
            if not _is_template(value) and _count(value, mw) is None:
                value = 10
            kwargs["max_in_flight"] = value
        return _build(w, model.Loop, **{"in": loop.get("in")}, **kwargs)

    # ---- routing (DSL 8)

    def _next(self, raw: Any, w: _Where, step: str) -> model.Next:
        arcs: list[tuple[Any, _Where]]
        mode = "exclusive"
        if raw is None:
            arcs = []
        elif isinstance(raw, str):
            arcs = [(raw, w)]
        elif isinstance(raw, list):
            arcs = [(item, w / i) for i, item in enumerate(raw)]
            if all(isinstance(item, str) for item in raw):
                mode = "inclusive"
            else:
                w.warn(
                    "legacy 'next' list of arcs rewritten to an exclusive router "
                    "(next: {spec: {mode: exclusive}, arcs: [...]})"
                )
        elif isinstance(raw, dict):
            nxt = _mapping(raw, w)
            _check_keys(nxt, w, ("spec", "arcs"))
            spec = _mapping(nxt.get("spec"), w / "spec")
            _check_keys(spec, w / "spec", ("mode",))
            if "mode" in spec:
                mode = (
                    _choice(spec["mode"], w / "spec" / "mode", ("exclusive", "inclusive")) or mode
                )
            items = nxt.get("arcs") or []
            if not isinstance(items, list):
                (w / "arcs").error(f"expected a list, got {_type_name(items)}")
                items = []
            arcs = [(item, w / "arcs" / i) for i, item in enumerate(items)]
        else:
            w.error(f"expected a step name, a list or a mapping, got {_type_name(raw)}")
            arcs = []
        built = [self._arc(item, aw) for item, aw in arcs]
        kept = tuple(a for a in built if a is not None)
        self.graph.arcs[step] = [a.step for a in kept]
        return _build(w, model.Next, mode=mode, arcs=kept) or model.Next()

    def _arc(self, raw: Any, w: _Where) -> model.Arc | None:
        sw = w if isinstance(raw, str) else w / "step"
        arc = _mapping({"step": raw} if isinstance(raw, str) else raw, w)
        _check_keys(arc, w, ("step", "when", "set", "args", "data"))
        target = arc.get("step")
        if target is None:
            w.error("field 'step' is required")
            return None
        if not isinstance(target, str):
            sw.error(f"expected a step name, got {_type_name(target)}")
            return None
        if target not in self.step_names:
            if target == "end":  # ends the branch (DSL 8)
                return None
            sw.error(f"unknown step {target!r}")
            return None
        args: dict[str, Any] = {}
        for key in ("args", "data"):
            if key in arc:
                (w / key).warn(f"arc {key!r} is deprecated: use 'set: {{ctx.*}}' or step input")
                args.update(_mapping(arc[key], w / key))
        when = _condition(arc["when"], w / "when") if arc.get("when") is not None else None
        return _build(
            w,
            model.Arc,
            step=target,
            when=when,
            set=_set_block(arc.get("set"), w / "set", bare_ok=False),
            args=args,
        )

    # ---- step spec (DSL 2, 10)

    def _step_spec(self, raw: Any, w: _Where, step: str) -> model.StepSpec:
        spec = _mapping(raw, w)
        _check_keys(spec, w, _STEP_SPEC_KEYS)
        ex, ex_raw = self.executor, self.executor_raw
        kwargs: dict[str, Any] = {
            "timeout": ex.timeout,
            "liveness": ex.liveness,
            "retry": ex.retry,
        }
        for key in ("timeout", "liveness"):
            if spec.get(key) is not None:
                kwargs[key] = _duration(spec[key], w / key)
        if spec.get("retry") is not None:
            kwargs["retry"] = self._retry(spec["retry"], w / "retry")
        timeout, liveness = kwargs["timeout"], kwargs["liveness"]
        own = "timeout" in spec or "liveness" in spec  # both inherited: reported on executor
        if own and timeout is not None and liveness is not None and liveness <= timeout:
            lt = (
                _dur_text(spec["liveness"])
                if "liveness" in spec
                else (f"{_dur_text(ex_raw.get('liveness'))} from executor.spec")
            )
            tt = (
                _dur_text(spec["timeout"])
                if "timeout" in spec
                else (f"{_dur_text(ex_raw.get('timeout'))} from executor.spec")
            )
            where = w / "liveness" if "liveness" in spec else w
            where.error(
                f"spec.liveness ({lt}) must be greater than spec.timeout ({tt})", show="none"
            )
        if spec.get("approval") is not None:
            kwargs["approval"] = self._approval(spec["approval"], w / "approval")
        if spec.get("policy") is not None:
            kwargs["admit"] = self._admit(spec["policy"], w / "policy")
        if spec.get("compensation") is not None:
            target = spec["compensation"]
            if isinstance(target, str):
                kwargs["compensation"] = target
                self.graph.compensation[step] = (target, w / "compensation")
            else:
                (w / "compensation").error(f"expected a step name, got {_type_name(target)}")
        return _build(w, model.StepSpec, **kwargs) or model.StepSpec()

    def _retry(self, raw: Any, w: _Where) -> model.RetrySpec | None:
        retry = _mapping(raw, w)
        _check_keys(retry, w, _RETRY_KEYS)
        kwargs: dict[str, Any] = {}
        if "max_attempts" in retry:
            kwargs["max_attempts"] = _count(retry["max_attempts"], w / "max_attempts") or 1
        for key in ("delay", "max_delay"):
            if key in retry:
                kwargs[key] = _duration(retry[key], w / key, positive=False) or 0.0
        if "backoff" in retry:
            kwargs["backoff"] = _choice(retry["backoff"], w / "backoff", _BACKOFFS) or "none"
        elif "delay" in retry:
            kwargs["backoff"] = "fixed"
        if "retry_on" in retry:
            kinds = retry["retry_on"]
            if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
                (w / "retry_on").error("expected a list of error kinds (strings)")
            else:
                kwargs["retry_on"] = tuple(kinds)
        return _build(w, model.RetrySpec, **kwargs)

    def _approval(self, raw: Any, w: _Where) -> model.ApprovalSpec | None:
        spec = _mapping(raw, w)
        _check_keys(spec, w, _APPROVAL_KEYS)
        approvers = spec.get("approvers")
        if not isinstance(approvers, list) or not approvers:
            (w / "approvers").error("expected a non-empty list of 'user:<id>' or 'role:<name>'")
            approvers = []
        for i, who in enumerate(approvers):
            if not isinstance(who, str) or not _APPROVER_RE.match(who):
                (w / "approvers" / i).error(f"expected 'user:<id>' or 'role:<name>', got {who!r}")
        kwargs: dict[str, Any] = {"approvers": tuple(str(a) for a in approvers)}
        if "quorum" in spec:
            quorum = _count(spec["quorum"], w / "quorum")
            distinct = set(kwargs["approvers"])
            users_only = distinct and all(a.startswith("user:") for a in distinct)
            if quorum is not None and users_only and quorum > len(distinct):
                (w / "quorum").error(
                    f"quorum {quorum} exceeds the {len(distinct)} listed approver(s)"
                )
            kwargs["quorum"] = quorum or 1
        if "required" in spec:
            kwargs["required"] = _condition(spec["required"], w / "required")
        if "allow_self_approval" in spec:
            if not isinstance(spec["allow_self_approval"], bool):
                (w / "allow_self_approval").error("expected a boolean")
            else:
                kwargs["allow_self_approval"] = spec["allow_self_approval"]
        if spec.get("expires_in") is not None:
            kwargs["expires_in"] = _duration(spec["expires_in"], w / "expires_in")
        if "risk" in spec:
            kwargs["risk"] = (
                _choice(spec["risk"], w / "risk", ("low", "medium", "high")) or "medium"
            )
        if spec.get("policy") is not None:
            kwargs.update(self._approval_policy(spec["policy"], w / "policy"))
        return _build(w, model.ApprovalSpec, **kwargs)

    @staticmethod
    def _approval_policy(raw: Any, w: _Where) -> dict[str, Any]:
        if isinstance(raw, str | bool):
            return {"policy_check": raw}
        policy = _mapping(raw, w)
        _check_keys(policy, w, ("check", "reason"))
        if "check" not in policy:
            w.error("expected a template or {check, reason}: field 'check' is required")
            return {}
        return {
            "policy_check": _condition(policy["check"], w / "check"),
            "policy_reason": policy.get("reason"),
        }

    def _admit(self, raw: Any, w: _Where) -> tuple[model.AdmitRule, ...]:
        policy = _mapping(raw, w)
        for key in policy:
            if key == "rules":
                (w / key).error(
                    "task policy rules belong in tool.spec.policy.rules; "
                    "step spec.policy only takes 'admit'"
                )
            elif key != "admit":
                (w / key).error(f"unknown field {key!r} (expected: admit)", show="parent")
        aw = w / "admit"
        admit = _mapping(policy.get("admit"), aw)
        _check_keys(admit, aw, ("rules",))
        rules = admit.get("rules") or []
        if not isinstance(rules, list):
            (aw / "rules").error(f"expected a list, got {_type_name(rules)}")
            return ()
        out = [self._admit_rule(r, aw / "rules" / i) for i, r in enumerate(rules)]
        return tuple(r for r in out if r is not None)

    def _admit_rule(self, raw: Any, w: _Where) -> model.AdmitRule | None:
        rule = _mapping(raw, w)
        when: Any = None
        if "else" in rule:
            _check_keys(rule, w, ("else",))
            body = _mapping(rule["else"], w / "else")
            if "then" in body:
                _check_keys(body, w / "else", ("then",))
                then_raw, tw = body["then"], w / "else" / "then"
            else:
                w.warn("admit 'else:' without 'then:' is deprecated: use 'else: {then: {...}}'")
                then_raw, tw = body, w / "else"
        else:
            _check_keys(rule, w, ("when", "then"))
            if "when" not in rule:
                w.error("a rule needs 'when' (with 'then') or 'else'")
                return None
            when = _condition(rule["when"], w / "when")
            then_raw, tw = rule.get("then"), w / "then"
        then = _mapping(then_raw, tw)
        _check_keys(then, tw, ("allow",))
        allow = then.get("allow", True)
        if not isinstance(allow, bool):
            (tw / "allow").error("expected a boolean")
            allow = True
        return _build(w, model.AdmitRule, when=when, allow=allow)

    # ---- workbook (DSL 3.6)

    def _workbook(self, raw: Any, w: _Where) -> dict[str, model.WorkbookEntry]:
        if raw is None:
            return {}
        if not isinstance(raw, list):
            w.error(f"expected a list of entries, got {_type_name(raw)}")
            return {}
        items: list[tuple[str, dict[str, Any], _Where]] = []
        for i, item in enumerate(raw):
            entry = _mapping(item, w / i)
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                if name is None:
                    (w / i).error("field 'name' is required")
                else:
                    (w / i / "name").error(f"expected a string, got {_type_name(name)}")
                continue
            ew = _Where(self.report, f"workbook {name!r}", (*w.base, *w.rel, i))
            if name in self.workbook_names:
                ew.error("duplicate workbook entry name")
                continue
            self.workbook_names.add(name)
            items.append((name, entry, ew))
        out: dict[str, model.WorkbookEntry] = {}
        for name, entry, ew in items:
            built = self._workbook_entry(name, entry, ew)
            if built is not None:
                out[name] = built
        return out

    def _workbook_entry(
        self, name: str, entry: dict[str, Any], w: _Where
    ) -> model.WorkbookEntry | None:
        _check_keys(entry, w, ("name", "desc", "tool", "assert"))
        tool = entry.get("tool")
        if not isinstance(tool, dict):
            w.error(
                "field 'tool' is required (a single tool mapping)"
                if tool is None
                else f"tool: expected a single tool mapping, got {_type_name(tool)}"
            )
            return None
        task = self._task(_mapping(tool, w / "tool"), w / "tool", name, (name,), single=True)
        desc = entry.get("desc")
        if task is None:
            return None
        return _build(
            w,
            model.WorkbookEntry,
            name=name,
            desc=desc if isinstance(desc, str) else None,
            task=task,
        )

    # ---- graph (entry step, compensation, joins)

    def _entry_step(self, raw_steps: list[tuple[str, dict[str, Any], _Where]]) -> str:
        names = [name for name, _, _ in raw_steps]
        wanted = self.executor.entry_step
        if wanted is not None:
            if wanted not in self.step_names:
                (self.root / "executor" / "spec" / "entry_step").error(f"unknown step {wanted!r}")
            return wanted
        if "start" in self.step_names:
            return "start"
        if names:
            self.root.warn(
                f"no step 'start' and no executor.spec.entry_step: "
                f"the first step {names[0]!r} is the entry step"
            )
            return names[0]
        return "start"

    def _graph_checks(
        self, entry: str, raw_steps: list[tuple[str, dict[str, Any], _Where]]
    ) -> tuple[frozenset[str], dict[str, frozenset[str]]]:
        arcs = self.graph.arcs
        reachable = _reachable(arcs, entry)
        for step, (target, w) in self.graph.compensation.items():
            if target not in self.step_names:
                w.error(f"unknown step {target!r}")
            elif target == step:
                w.error("a step cannot compensate itself")
            elif target in reachable:
                w.error(
                    f"step {target!r} is reachable through arcs from the entry step "
                    f"{entry!r}; a compensation step must only run as a compensation"
                )
            elif target in self.graph.compensation:
                w.error(f"step {target!r} has a compensation itself")
        compensations = {t for t, _ in self.graph.compensation.values()}
        for name, _, w in raw_steps:
            if name not in reachable and name not in compensations and entry in self.step_names:
                w.warn(f"not reachable from the entry step {entry!r}")
        sources: dict[str, set[str]] = {}
        for src, targets in arcs.items():
            for target in targets:
                sources.setdefault(target, set()).add(src)
        joins = frozenset(t for t, s in sources.items() if len(s) > 1)
        return joins, {j: _reaches(sources, j) for j in sorted(joins)}


def _reachable(arcs: dict[str, list[str]], start: str) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for target in arcs.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _reaches(sources: dict[str, set[str]], join: str) -> frozenset[str]:
    """Steps from which `join` is reachable along arcs without passing through it."""
    seen: set[str] = set()
    todo = [join]
    while todo:
        for src in sources.get(todo.pop(), ()):
            if src != join and src not in seen:
                seen.add(src)
                todo.append(src)
    return frozenset(seen)
