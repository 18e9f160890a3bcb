"""The render context of DSL 9.2, built from an execution's state.

Precedence (later wins a name clash): workload keys, step results by name, then
whatever the caller overlays (task results, input keys, loop variables). Reserved
names always mean the engine's values, so they are written last.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from milepost.core.state import ExecutionState, StepRun


def base_context(state: ExecutionState, names: Iterable[str] | None = None) -> dict[str, Any]:
    """Workload keys, `workload`, step results, `ctx`, empty `iter`, `execution_id`.

    With `names`, only those workload keys and step results (the reserved names are always
    there): what one step reads (`playbook.reads`).
    """
    context: dict[str, Any]
    if names is None:
        context = dict(state.workload)
        context.update(state.results)
    else:
        context = {}
        for name in names:
            if name in state.results:
                context[name] = state.results[name]
            elif name in state.workload:
                context[name] = state.workload[name]
    context["workload"] = state.workload
    context["ctx"] = state.ctx
    context["iter"] = {}
    context["execution_id"] = str(state.execution_id)
    return context


def iteration_vars(step_run: StepRun, iterator: str, index: int) -> dict[str, Any]:
    """The loop variables of one iteration: the iterator, `_index`, `_total`, `loop_index`."""
    assert step_run.items is not None
    return {
        iterator: step_run.items[index],
        "_index": index,
        "_total": len(step_run.items),
        "loop_index": index,
    }


def overlay(context: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`context` with `extra` on top; reserved names of `context` keep their values."""
    merged = dict(context)
    merged.update(extra)
    for name in ("workload", "ctx", "execution_id"):
        if name in context:
            merged[name] = context[name]
    return merged


def with_writes(ctx: Mapping[str, Any], writes: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `ctx` with dotted writes applied, copying only the mappings on the paths."""
    result = dict(ctx)
    for key, value in writes.items():
        parts = key.split(".")
        target = result
        for part in parts[:-1]:
            nxt = target.get(part)
            nxt = dict(nxt) if isinstance(nxt, Mapping) else {}
            target[part] = nxt
            target = nxt
        target[parts[-1]] = value
    return result


def split_set_key(key: str) -> tuple[str, str]:
    """`ctx.a.b` -> ('ctx', 'a.b'); `iter.x` -> ('iter', 'x'); `step.x`/`x` -> ('local', 'x')."""
    head, _, rest = key.partition(".")
    if head in ("ctx", "iter") and rest:
        return head, rest
    if head == "step" and rest:
        return "local", rest
    return "local", key
