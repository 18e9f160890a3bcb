"""Tools (DSL 3, 4): a step's single tool or pipeline of tasks, and the workbook's
named tools (DSL 3.6). Each becomes a `model.Task` whose `config` holds the kind's own
fields, after the legacy rewrites, with the fields milepost ignores dropped."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from milepost.playbook import (
    durations,
    fields,
    legacy,
    model,
    nats_ops,
    problems,
    python_libs,
    python_syntax,
    scripts,
    task_policy,
    template_syntax,
    tool_aliases,
    tool_fields,
    tool_spec,
)
from milepost.playbook.coercion import is_template
from milepost.playbook.context import LoadContext

TOOL_KINDS = (
    "python",
    "http",
    "postgres",
    "duckdb",
    "shell",
    "noop",
    "workbook",
    "playbook",
    "nats",
)
"""Tool kinds milepost runs (DSL 3)."""

_REQUIRED_TOOL_FIELDS: dict[str, tuple[str, ...]] = {
    "python": ("code",),
    "http": ("url",),
    "postgres": ("command", "query"),
    "duckdb": ("query", "command"),
    "shell": ("command", "cmds"),
    "workbook": ("name",),
    "playbook": ("path",),
    "nats": ("operation",),
}
"""Per kind, the fields of which at least one must be set."""
_IGNORED_TOOL_FIELDS = frozenset({"pool", "assert", "task"})

Named = tuple[str, dict[str, Any] | None]
"""A pipeline item and its task name; None marks an item that cannot be used."""


def source(raw: dict[str, Any], w: problems.Where) -> tuple[Any, problems.Where]:
    """The step's tool, after the legacy python rewrites of DSL 11."""
    rewritten = legacy.step_tool(raw, w)
    if rewritten is not None:
        return rewritten
    tool = raw.get("tool")
    tw = w / "tool"
    if isinstance(tool, str):
        kinds = f"{{kind: {tool}, ...}}" if tool in TOOL_KINDS else "{kind: ..., ...}"
        tw.error(f"expected a tool mapping such as {kinds} or a list of tasks")
        return legacy.REPORTED, tw
    return tool, tw


def tasks(
    ctx: LoadContext, raw: Any, w: problems.Where, step: str
) -> tuple[tuple[model.Task, ...], bool]:
    """The step's tasks, and whether they form a pipeline (a list, even of one)."""
    if raw is legacy.REPORTED:
        return (), False
    if raw is None:
        replace(w, rel=w.rel[:-1]).error("field 'tool' is required")
        return (), False
    if isinstance(raw, dict):
        task = _task(ctx, fields.mapping(raw, w), w, step, (step,), single=True)
        return ((task,) if task is not None else ()), False
    if not isinstance(raw, list):
        w.error(f"expected a tool mapping or a list of tasks, got {problems.type_name(raw)}")
        return (), False
    if not raw:
        w.error("a pipeline needs at least one task")
        return (), True
    named = _task_names(raw, w)
    names = tuple(n for n, _ in named)
    built = [
        _task(ctx, item, w / i, n, names) for i, (n, item) in enumerate(named) if item is not None
    ]
    return tuple(t for t in built if t is not None), True


def _task_names(raw: list[Any], w: problems.Where) -> list[Named]:
    """Task names of a pipeline (unnamed: `task_<index>`)."""
    explicit = {i["name"] for i in raw if isinstance(i, dict) and isinstance(i.get("name"), str)}
    seen: set[str] = set()
    return [_task_name(item, w / i, i, explicit, seen) for i, item in enumerate(raw)]


def _task_name(item: Any, w: problems.Where, i: int, explicit: set[Any], seen: set[str]) -> Named:
    if not isinstance(item, dict):
        w.error(f"a task must be a mapping, got {problems.type_name(item)}")
        return f"task_{i}", None
    if "kind" not in item and len(item) == 1 and isinstance(next(iter(item.values())), dict):
        key = next(iter(item))
        w.error(
            f"task shorthand '- {key}: {{...}}' is not supported: "
            f"use '- name: {key}' with the tool fields beside it"
        )
        return str(key), None
    if "name" in item:
        name = fields.name(item["name"], w / "name", "task") or f"task_{i}"
    else:
        name = f"task_{i}"
        while name in explicit or name in seen:  # never take a name given to another task
            name += "_"
    if name in seen:
        (w / "name").error(f"duplicate task name {name!r}")
    seen.add(name)
    return name, fields.mapping(item, w)


def _task(
    ctx: LoadContext,
    raw: dict[str, Any],
    w: problems.Where,
    name: str,
    task_names: tuple[str, ...],
    *,
    single: bool = False,
) -> model.Task | None:
    raw = tool_spec.lift(raw, w)
    kind = _kind(raw, w)
    if kind is None:
        return None
    input_ = _task_input(raw, w, kind)
    spec = fields.mapping(raw.get("spec"), w / "spec")
    config = _tool_config(ctx, raw, w, kind, single)
    return fields.build(
        w,
        model.Task,
        name=name,
        kind=kind,
        input=input_,
        config=config,
        policy=task_policy.check(spec, w / "spec", task_names),
        set=fields.set_block(raw.get("set"), w / "set", bare_ok=True),
        timeout=durations.check(spec["timeout"], w / "spec" / "timeout")
        if spec.get("timeout") is not None
        else None,
    )


def _kind(raw: dict[str, Any], w: problems.Where) -> str | None:
    kind: str | None = raw.get("kind")
    if kind is None:
        w.error("field 'kind' is required")
        return None
    if kind not in TOOL_KINDS:
        (w / "kind").error(f"unknown tool kind {kind!r} (known: {', '.join(TOOL_KINDS)})")
        return None
    return kind


def _task_input(raw: dict[str, Any], w: problems.Where, kind: str) -> dict[str, Any]:
    input_: dict[str, Any] = {}
    if "args" in raw:
        (w / "args").warn("'args' is deprecated: use 'input'", show="parent")
        input_.update(fields.mapping(raw["args"], w / "args"))
    if kind == "playbook" and "payload" in raw:  # DSL 12: NoETL's name for the child's input
        if "input" in raw:
            (w / "payload").error("'payload' is an alias of 'input': give only one of them")
        input_.update(fields.mapping(raw["payload"], w / "payload"))
    input_.update(fields.mapping(raw.get("input"), w / "input"))
    return input_


def _tool_config(
    ctx: LoadContext, raw: dict[str, Any], w: problems.Where, kind: str, single: bool
) -> dict[str, Any]:
    reserved = {"kind", "input", "args", "set", "spec"}
    if kind == "playbook":
        reserved.add("payload")  # the task's input (`_task_input`)
    if not single or kind not in ("workbook", "nats"):  # a step's own tool names its
        reserved.add("name")  # workbook entry, or nats object (in a pipeline: `object`)
    config: dict[str, Any] = {}
    tool_fields.check(raw, w, kind, skip=(*legacy.REJECTED, *_IGNORED_TOOL_FIELDS))
    for key, value in raw.items():
        if key in reserved:
            continue
        if key in legacy.REJECTED:
            (w / key).error(legacy.REJECTED[key], show="parent")
        elif key in _IGNORED_TOOL_FIELDS:
            (w / key).warn(f"field {key!r} is ignored", show="parent")
        else:
            config[key] = value
    if kind == "workbook" and "name" in raw:
        config["name"] = raw["name"]
    scripts.check(config, w, kind)
    if kind == "http":
        legacy.http_aliases(config, w)
    elif kind == "python":
        _python_config(config, w)
    tool_aliases.apply(config, kind, w)
    _required_fields(ctx, config, w, kind)
    if config.get("timeout") is not None and not is_template(config["timeout"]):
        durations.check(config["timeout"], w / "timeout")  # one the tool reads (DSL 12.2)
    return config


def _python_config(config: dict[str, Any], w: problems.Where) -> None:
    if "script" in config and config["script"] is not legacy.UNSUPPORTED:
        legacy.inline_script(config, w)
    if "code" in config and not isinstance(config["code"], str):
        (w / "code").error(f"expected a string, got {problems.type_name(config['code'])}")
    python_syntax.check(config.get("code"), w / "code")
    if "libs" in config:
        python_libs.check(config["libs"], w / "libs")


def _required_fields(
    ctx: LoadContext, config: dict[str, Any], w: problems.Where, kind: str
) -> None:
    needed = _REQUIRED_TOOL_FIELDS.get(kind, ())
    if needed and all(config.get(f) in (None, "") for f in needed) and not _scripted(config):
        which = " or ".join(repr(f) for f in needed)
        w.error(f"field {which} is required for kind {kind!r}")
        return
    if kind == "nats":
        nats_ops.check(config, w)
    elif kind == "workbook":
        entry = config["name"]
        if not isinstance(entry, str) or entry not in ctx.workbook_names:
            (w / "name").error(f"unknown workbook entry {entry!r}")


def _scripted(config: dict[str, Any]) -> bool:
    """A `script: {uri, ...}` the loader inlines into the required field (DSL 12), or a
    python script already reported as unsupported (no second "code is required")."""
    script = config.get("script")
    return isinstance(script, dict) and "uri" in script or script is legacy.UNSUPPORTED


# --------------------------------------------------------------------------- workbook


def workbook(ctx: LoadContext, raw: Any, w: problems.Where) -> dict[str, model.WorkbookEntry]:
    """The workbook's entries by name; every name is known before any entry is checked."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        w.error(f"expected a list of entries, got {problems.type_name(raw)}")
        return {}
    named = [_entry_name(ctx, entry, w / i) for i, entry in enumerate(raw)]
    out: dict[str, model.WorkbookEntry] = {}
    for item in named:
        if item is None:
            continue
        built = _workbook_entry(ctx, *item)
        if built is not None:
            out[item[0]] = built
    return out


def _entry_name(
    ctx: LoadContext, raw: Any, w: problems.Where
) -> tuple[str, dict[str, Any], problems.Where] | None:
    entry = fields.mapping(raw, w)
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        if name is None:
            w.error("field 'name' is required")
        else:
            (w / "name").error(f"expected a string, got {problems.type_name(name)}")
        return None
    ew = w.scope(f"workbook {name!r}")
    if name in ctx.workbook_names:
        ew.error("duplicate workbook entry name")
        return None
    ctx.workbook_names.add(name)
    return name, entry, ew


def _workbook_entry(
    ctx: LoadContext, name: str, entry: dict[str, Any], w: problems.Where
) -> model.WorkbookEntry | None:
    fields.check_keys(entry, w, ("name", "desc", "tool", "assert"))
    template_syntax.check(entry, w)
    tool = entry.get("tool")
    if not isinstance(tool, dict):
        w.error(
            "field 'tool' is required (a single tool mapping)"
            if tool is None
            else f"tool: expected a single tool mapping, got {problems.type_name(tool)}"
        )
        return None
    task = _task(ctx, fields.mapping(tool, w / "tool"), w / "tool", name, (name,), single=True)
    desc = entry.get("desc")
    if task is None:
        return None
    return fields.build(
        w,
        model.WorkbookEntry,
        name=name,
        desc=desc if isinstance(desc, str) else None,
        task=task,
    )
