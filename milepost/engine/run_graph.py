"""A run's step graph as the web UI draws it: one node per step (never one per loop
iteration) with its status and, for a loop, how many iterations are done, running and
failed, a teardown step marked as one; one edge per arc of the playbook (DSL 8) and per
compensation (DSL 10.5)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from milepost.core import state as st
from milepost.playbook import model


def run_graph(
    state: st.ExecutionState,
    playbook: model.Playbook,
    waits: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """`{execution_id, status, entry_step, nodes: [...], edges: [...]}` (`GraphOut`); each
    node's `wait` is the first of `waits` (`engine.diagnosis.waits`) naming its step."""
    first: dict[str, dict[str, Any]] = {}
    for wait in waits:
        if wait.get("step") is not None:
            first.setdefault(wait["step"], wait)
    torn = set(playbook.executor.teardown)
    nodes = [
        _node(state, step, step.name in torn, first.get(step.name))
        for step in playbook.steps.values()
    ]
    edges: list[dict[str, Any]] = []
    for step in playbook.steps.values():
        for i, arc in enumerate(step.next.arcs):
            if arc.step in playbook.steps:
                edges.append(
                    {
                        "id": f"{step.name}->{arc.step}#{i}",
                        "source": step.name,
                        "target": arc.step,
                        "kind": "next",
                        "conditional": arc.when is not None,
                    }
                )
        target = step.spec.compensation
        if target is not None and target in playbook.steps:
            edges.append(
                {
                    "id": f"{step.name}~>{target}",
                    "source": step.name,
                    "target": target,
                    "kind": "compensation",
                    "conditional": False,
                }
            )
    return {
        "execution_id": str(state.execution_id),
        "status": state.status,
        "entry_step": playbook.entry_step,
        "nodes": nodes,
        "edges": edges,
    }


def _node(
    state: st.ExecutionState, step: model.Step, teardown: bool, wait: dict[str, Any] | None
) -> dict[str, Any]:
    kinds = sorted({task.kind for task in step.tasks})
    return {
        "id": step.name,
        "desc": step.desc,
        "kind": ",".join(kinds) or "noop",
        "tasks": len(step.tasks),
        "loop": step.loop is not None,
        "status": state.step_status.get(step.name, "PENDING"),
        "runs": state.run_counts.get(step.name, 0),
        "iterations": _iterations(state, step) if step.loop is not None else None,
        "teardown": teardown,
        "wait": wait,
    }


def _iterations(state: st.ExecutionState, step: model.Step) -> dict[str, int]:
    """`{total, done, running, failed}` of the step's latest run: a live run's from its
    `StepRun`, an ended one's from its result (a `LoopResult` counts the iterations a policy
    let fail)."""
    run = state.running.get(step.name)
    if run is not None and run.items is not None:
        return {
            "total": run.total,
            "done": len(run.results),
            "running": len(run.in_flight),
            "failed": len(run.failures) + run.failed_ok,
        }
    result = state.results.get(step.name)
    if isinstance(result, list):
        failed = int(getattr(result, "failed", 0))
        return {"total": len(result), "done": len(result) - failed, "running": 0, "failed": failed}
    return {"total": 0, "done": 0, "running": 0, "failed": 0}
