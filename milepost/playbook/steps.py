"""Workflow steps (DSL 2, 6): names first, then each step's own fields and loop; its
tool, `next` and `spec` are checked by the modules named after them."""

from __future__ import annotations

from typing import Any

from milepost.playbook import (
    fields,
    legacy,
    model,
    problems,
    routing,
    step_spec,
    template_syntax,
    tools,
)
from milepost.playbook.context import LoadContext, RawStep

_STEP_KEYS = frozenset({"step", "desc", "input", "tool", "loop", "set", "next", "spec", "output"})
_TOOL_FIELD_HINTS = frozenset(
    {
        "kind",
        "code",
        "libs",
        "script",
        "command",
        "query",
        "url",
        "endpoint",
        "method",
        "headers",
        "params",
        "json",
        "body",
        "auth",
        "database",
        "schema",
        "path",
        "cwd",
        "env",
        "return_step",
        "return_result",
        "result_step",
    }
)
_STEP_KEY_HINTS = {
    "name": "did you mean step?",
    "when": "conditions belong in next.arcs[].when or spec.policy.admit",
    "description": "did you mean desc?",
}
_LOOP_KEYS = ("in", "iterator", "spec", "mode", "max_in_flight", "cursor")
_LOOP_KEY_HINTS = {"collection": "in", "element": "iterator"}


def collect(ctx: LoadContext, doc: dict[str, Any], w: problems.Where) -> list[RawStep]:
    """First pass over `workflow`: names (unique, valid) so arcs can be checked."""
    raw = doc.get("workflow")
    if "workflow" not in doc:
        ctx.root.error("field 'workflow' is required")
        return []
    if not isinstance(raw, list) or not raw:
        w.error(f"expected a non-empty list of steps, got {problems.type_name(raw)}")
        return []
    out: list[RawStep] = []
    first_line: dict[str, int | None] = {}
    for i, item in enumerate(raw):
        found = _named(ctx, item, w / i, first_line)
        if found is not None:
            out.append(found)
    ctx.step_names = {name for name, _, _ in out}
    return out


def _named(
    ctx: LoadContext, item: Any, w: problems.Where, first_line: dict[str, int | None]
) -> RawStep | None:
    if not isinstance(item, dict):
        w.error(f"a step must be a mapping, got {problems.type_name(item)}")
        return None
    if "step" not in item:
        w.error("field 'step' is required")
        return None
    name = fields.name(item["step"], w / "step", "step")
    if name is None:
        return None
    sw = w.scope(f"step {name!r}")
    if name in first_line:
        where = f" (first defined at line {first_line[name]})" if first_line[name] else ""
        sw.error(f"duplicate step name{where}")
        return None
    first_line[name] = ctx.report.line(sw.base)
    return name, fields.mapping(item, sw), sw


def check(ctx: LoadContext, raw: dict[str, Any], w: problems.Where, name: str) -> model.Step | None:
    _check_keys(raw, w)
    template_syntax.check(raw, w)
    tool_raw, tool_w = tools.source(raw, w)
    tasks, pipeline = tools.tasks(ctx, tool_raw, tool_w, name)
    desc = raw.get("desc")
    if desc is not None and not isinstance(desc, str):
        (w / "desc").error(f"expected a string, got {problems.type_name(desc)}")
        desc = None
    if "output" in raw:
        (w / "output").warn("field 'output' is ignored", show="parent")
    input_ = _input(raw, w)
    loop = _loop(raw["loop"], w / "loop") if raw.get("loop") is not None else None
    next_ = routing.check(ctx, raw.get("next"), w / "next", name)
    spec = step_spec.check(ctx, raw.get("spec"), w / "spec", name)
    return fields.build(
        w,
        model.Step,
        name=name,
        desc=desc,
        input=input_,
        tasks=tasks,
        pipeline=pipeline,
        loop=loop,
        set=fields.set_block(raw.get("set"), w / "set", bare_ok=False),
        next=next_,
        spec=spec,
    )


def _check_keys(raw: dict[str, Any], w: problems.Where) -> None:
    # `type`, `code` and `libs` are legacy python forms (DSL 11), checked with the tool.
    legacy_python = raw.get("type") == "python" or raw.get("tool") == "python"
    for key in raw:
        kw = w / key
        if key in _STEP_KEYS or key in ("args", "data", "type"):
            continue
        if key in ("code", "libs") and legacy_python:
            continue
        if key in legacy.REJECTED:
            kw.error(legacy.REJECTED[key], show="parent")
        elif key in _TOOL_FIELD_HINTS:
            kw.error(f"unknown field {key!r} (did you mean tool.{key}?)", show="parent")
        elif key in _STEP_KEY_HINTS:
            kw.error(f"unknown field {key!r} ({_STEP_KEY_HINTS[key]})", show="parent")
        else:
            kw.error(f"unknown field {key!r}", show="parent")


def _input(raw: dict[str, Any], w: problems.Where) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for legacy_key in ("args", "data"):
        if legacy_key in raw:
            (w / legacy_key).warn(f"step {legacy_key!r} is deprecated: use 'input'", show="parent")
            merged.update(fields.mapping(raw[legacy_key], w / legacy_key))
    merged.update(fields.mapping(raw.get("input"), w / "input"))
    return merged


# --------------------------------------------------------------------------- loop (DSL 6)


def _loop(raw: Any, w: problems.Where) -> model.Loop | None:
    loop = fields.mapping(raw, w)
    _check_loop_keys(loop, w)
    settings = _loop_settings(loop, w)
    kwargs: dict[str, Any] = {}
    if "in" not in loop:
        w.error("field 'in' is required")
    elif not isinstance(loop["in"], str | list):
        (w / "in").error(f"expected a template or a list, got {problems.type_name(loop['in'])}")
    if "iterator" in loop:
        kwargs["iterator"] = fields.name(loop["iterator"], w / "iterator", "iterator") or "item"
    if "mode" in settings:
        value, mw = settings["mode"]
        kwargs["mode"] = fields.choice(value, mw, ("sequential", "parallel")) or "sequential"
    if "max_in_flight" in settings:
        value, mw = settings["max_in_flight"]
        if not fields.is_template(value) and fields.count(value, mw) is None:
            value = 10
        kwargs["max_in_flight"] = value
    return fields.build(w, model.Loop, **{"in": loop.get("in")}, **kwargs)


def _check_loop_keys(loop: dict[str, Any], w: problems.Where) -> None:
    if "cursor" in loop:
        (w / "cursor").error("cursor loops are not supported", show="parent")
    for key in loop:
        if key in _LOOP_KEY_HINTS:
            (w / key).error(f"unknown field {key!r} (did you mean {_LOOP_KEY_HINTS[key]}?)")
        elif key not in _LOOP_KEYS:
            (w / key).error(f"unknown field {key!r}", show="parent")


def _loop_settings(
    loop: dict[str, Any], w: problems.Where
) -> dict[str, tuple[Any, problems.Where]]:
    """`mode` and `max_in_flight` with where they were written: `loop.spec`, else the
    legacy place right under `loop` (with a warning)."""
    spec = fields.mapping(loop.get("spec"), w / "spec")
    fields.check_keys(spec, w / "spec", ("mode", "max_in_flight", "policy"))
    if "policy" in spec:
        _placement(spec["policy"], w / "spec" / "policy")
    settings: dict[str, tuple[Any, problems.Where]] = {}
    for key in ("mode", "max_in_flight"):
        if key in loop:
            (w / key).warn(f"{key!r} is deprecated: use loop.spec.{key}", show="parent")
            settings[key] = (loop[key], w / key)
        if key in spec:
            settings[key] = (spec[key], w / "spec" / key)
    return settings


_PLACEMENTS = ("distributed", "local")


def _placement(policy: Any, w: problems.Where) -> None:
    """`loop.spec.policy: {exec: distributed|local}` (DSL 6, a NoETL placement hint): every
    iteration is a command either way, in the step's pool, so it only has to be valid."""
    policy = fields.mapping(policy, w)
    fields.check_keys(policy, w, ("exec",))
    placement = policy.get("exec", "distributed")
    if placement not in _PLACEMENTS:
        (w / "exec").error(f"expected one of {', '.join(_PLACEMENTS)}, got {placement!r}")
