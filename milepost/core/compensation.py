"""Compensating a run that ends FAILED or CANCELLED (DSL 10.5), as decisions.

When nothing runs any more, before the terminal event: each completed run of a step naming
`spec.compensation` gets that step run once, newest completion first, one at a time, with
`compensation = {step, run, result}` in its render context (`core.work`). The compensation
step's `spec` applies (timeout in the worker, `spec.retry` here); its `next` and `set` are
ignored: a compensation moves no step and no ctx. A failing compensation is recorded and
the next one still runs; the run then ends (its teardown first, `core.teardown`) with the
status and error it was going to end with. Each is run as every final step is
(`core.final_steps`); the fold is in `core.compensation_state`.
"""

from __future__ import annotations

from typing import Any

from milepost.core import events as ev
from milepost.core import final_steps
from milepost.core import state as st
from milepost.playbook import model


def plan(state: st.ExecutionState, playbook: model.Playbook) -> list[dict[str, Any]]:
    """The compensations to run, in the order they run: the completed runs of steps naming
    one, newest first (a loop step completes once: one entry, with its loop result)."""
    runs: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for step, run in reversed(state.completed_runs):
        definition = playbook.steps.get(step)
        target = definition.spec.compensation if definition is not None else None
        if target is None or target not in playbook.steps:
            continue
        runs[target] = runs.get(target, state.run_counts.get(target, 0)) + 1
        out.append(
            {"step": step, "run": run, "compensation": target, "compensation_run": runs[target]}
        )
    return out


def proceed(out: final_steps.Emitter, playbook: model.Playbook, outcome: str) -> bool:
    """Move compensating on by one decision; False once there is nothing (more) to undo and
    the run may end. `outcome`: the status it ends with (FAILED or CANCELLED)."""
    state = out.state
    comp = state.compensation
    if comp is None:
        planned = plan(state, playbook)
        if not planned:
            return False
        out.emit(ev.COMPENSATION_STARTED, outcome=outcome, plan=planned)
        return True
    current = comp.current
    if current is None:
        return False
    index, item = current
    # the event's step is the compensation step; `undoes` names the step run it undid
    where: dict[str, Any] = {"index": index, "undoes": {"step": item.step, "run": item.run}}
    reason = f"compensation '{item.target}' of step '{item.step}' failed"
    ends = final_steps.Ends(ev.COMPENSATION_COMPLETED, ev.COMPENSATION_FAILED, where, reason)
    final_steps.advance(out, playbook, item, {"compensation": index}, ends)
    return True
