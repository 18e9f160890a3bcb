"""`executor.spec.teardown` (docs/language.md): the steps a run runs once each, in the
order listed, after its outcome is decided, whatever it is.

Their names are read with `executor.spec` and checked against the graph once every arc is
known (`graph.check`: they exist, no arc reaches them, none is a compensation or has one,
none is listed twice); their shape here, once the steps are built: a teardown step runs
once, by itself, as the run ends, so it has no loop, no approval and no admission rule,
and its `next` and `set` are ignored (a warning says so)."""

from __future__ import annotations

from typing import Any

from milepost.playbook import model, problems
from milepost.playbook.context import LoadContext


def names(ctx: LoadContext, raw: Any, w: problems.Where) -> tuple[str, ...]:
    """The step names of `executor.spec.teardown` (one name, or a list of them), recorded
    for the graph checks that need every step."""
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list):
        w.error(f"expected a step name or a list of step names, got {problems.type_name(raw)}")
        return ()
    out: list[str] = []
    for i, name in enumerate(items):
        at = w if isinstance(raw, str) else w / i
        if not isinstance(name, str):
            at.error(f"expected a step name, got {problems.type_name(name)}")
            continue
        ctx.graph.teardown.append((name, at))
        out.append(name)
    return tuple(out)


def check_steps(
    ctx: LoadContext, steps: dict[str, model.Step], places: dict[str, problems.Where]
) -> None:
    """What a teardown step cannot be: each problem at the step's own field."""
    for name in dict.fromkeys(ctx.executor.teardown):
        step, w = steps.get(name), places.get(name)
        if step is None or w is None:
            continue  # an unknown step: `graph.check` says so
        if step.loop is not None:
            (w / "loop").error("a teardown step runs once: it cannot loop")
        if step.spec.approval is not None:
            (w / "spec" / "approval").error(
                "a teardown step cannot wait for an approval: it runs as the run ends"
            )
        if step.spec.admit:
            (w / "spec" / "policy").error("a teardown step always runs: it takes no admit rules")
        if step.next.arcs:
            (w / "next").warn("ignored: a teardown step's arcs are never followed")
        if step.set:
            (w / "set").warn("ignored: a teardown step writes no ctx")
