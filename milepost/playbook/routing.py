"""A step's `next` (DSL 8): the arcs to the steps that may follow, and whether the first
matching arc (exclusive) or every matching arc (inclusive) is taken. Arcs are recorded
in the step graph for the checks that need every step."""

from __future__ import annotations

from typing import Any

from milepost.playbook import fields, model, problems
from milepost.playbook.context import LoadContext

_Items = list[tuple[Any, problems.Where]]


def check(ctx: LoadContext, raw: Any, w: problems.Where, step: str) -> model.Next:
    mode, items = _items(raw, w)
    built = [_arc(ctx, item, aw) for item, aw in items]
    kept = tuple(a for a in built if a is not None)
    ctx.graph.arcs[step] = [a.step for a in kept]
    return fields.build(w, model.Next, mode=mode, arcs=kept) or model.Next()


def _items(raw: Any, w: problems.Where) -> tuple[str, _Items]:
    """(mode, arcs as written) for each form `next` may take."""
    if raw is None:
        return "exclusive", []
    if isinstance(raw, str):
        return "exclusive", [(raw, w)]
    if isinstance(raw, list):
        items = [(item, w / i) for i, item in enumerate(raw)]
        if all(isinstance(item, str) for item in raw):
            return "inclusive", items
        w.warn(
            "legacy 'next' list of arcs rewritten to an exclusive router "
            "(next: {spec: {mode: exclusive}, arcs: [...]})"
        )
        return "exclusive", items
    if isinstance(raw, dict):
        return _router(raw, w)
    w.error(f"expected a step name, a list or a mapping, got {problems.type_name(raw)}")
    return "exclusive", []


def _router(raw: dict[str, Any], w: problems.Where) -> tuple[str, _Items]:
    """`next: {spec: {mode}, arcs: [...]}`."""
    mode = "exclusive"
    nxt = fields.mapping(raw, w)
    fields.check_keys(nxt, w, ("spec", "arcs"))
    spec = fields.mapping(nxt.get("spec"), w / "spec")
    fields.check_keys(spec, w / "spec", ("mode",))
    if "mode" in spec:
        mode = fields.choice(spec["mode"], w / "spec" / "mode", ("exclusive", "inclusive")) or mode
    items = nxt.get("arcs") or []
    if not isinstance(items, list):
        (w / "arcs").error(f"expected a list, got {problems.type_name(items)}")
        items = []
    return mode, [(item, w / "arcs" / i) for i, item in enumerate(items)]


def _arc(ctx: LoadContext, raw: Any, w: problems.Where) -> model.Arc | None:
    sw = w if isinstance(raw, str) else w / "step"
    arc = fields.mapping({"step": raw} if isinstance(raw, str) else raw, w)
    fields.check_keys(arc, w, ("step", "when", "set", "args", "data"))
    target = arc.get("step")
    if target is None:
        w.error("field 'step' is required")
        return None
    if not isinstance(target, str):
        sw.error(f"expected a step name, got {problems.type_name(target)}")
        return None
    if target not in ctx.step_names:
        if target == "end":  # ends the branch (DSL 8)
            return None
        sw.error(f"unknown step {target!r}")
        return None
    args = _arc_args(arc, w)
    when = fields.condition(arc["when"], w / "when") if arc.get("when") is not None else None
    return fields.build(
        w,
        model.Arc,
        step=target,
        when=when,
        set=fields.set_block(arc.get("set"), w / "set", bare_ok=False),
        args=args,
    )


def _arc_args(arc: dict[str, Any], w: problems.Where) -> dict[str, Any]:
    """Legacy arc `args`/`data`: extra input for that run of the target step (DSL 11)."""
    args: dict[str, Any] = {}
    for key in ("args", "data"):
        if key in arc:
            (w / key).warn(f"arc {key!r} is deprecated: use 'set: {{ctx.*}}' or step input")
            args.update(fields.mapping(arc[key], w / key))
    return args
