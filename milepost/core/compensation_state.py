"""The fold of compensating (DSL 10.5): which completed step runs are being undone, and how
far that got.

A run that ends FAILED or CANCELLED first undoes, one at a time and newest first, each
completed run of a step naming `spec.compensation`. The log records it as:
- `compensation.started` `{outcome, plan: [{step, run, compensation, compensation_run}]}`:
  the status the run ends with and every compensation to run, in the order they run;
- per item, the compensation step's commands: `command.issued` (and
  `command.retry_scheduled`) with `compensation: <index in plan>`, the worker's
  `command.completed`/`command.failed` (or `command.lease_expired`) as for any command;
- per item, its outcome (step: the compensation step): `compensation.completed`
  `{index, undoes: {step, run}, result}` or `compensation.failed` `{index, undoes, error}`.
Dedicated outcome events rather than a `step.exit` of the compensation step: a step.exit
moves step statuses, results, `completed_runs`, the run's failure and its arcs, all of which
a compensation must leave alone, so it would need a marker checked in each of those places.

Compensations are a run's first final steps (`core.final_step_state`: each item folds as a
`Work`; teardown comes after them). The state is `ExecutionState.compensation` (None until
compensating starts, a `final_step_state.Compensation`, kept there so that `core.state`
imports no module that reads the state back): the fold knows
which items are done, so a run resumed after a crash goes on with the next one and never
runs one twice (a command in flight at the crash is re-delivered like any command).
"""

from __future__ import annotations

from typing import Any

from milepost.core import events as ev
from milepost.core import final_step_state as fs
from milepost.core.final_step_state import Compensation, CompensationItem
from milepost.core.state import Command, ExecutionState

PENDING = fs.PENDING
RUNNING = fs.RUNNING
COMPLETED = fs.COMPLETED
FAILED = fs.FAILED


def compensating(state: ExecutionState) -> bool:
    """True while compensations are still to run (`milepost status`: `compensating`)."""
    return state.compensation is not None and state.compensation.active


def context_of(state: ExecutionState, command_id: int) -> dict[str, Any] | None:
    """`compensation = {step, run, result}` for the render context of a compensation's
    command (DSL 10.5), None for any other command."""
    comp = state.compensation
    if comp is None:
        return None
    for item in comp.items:
        if item.command_id == command_id:
            return {
                "step": item.step,
                "run": item.run,
                "result": state.run_results.get((item.step, item.run)),
            }
    return None


# -- fold ------------------------------------------------------------------------------------


def apply_started(state: ExecutionState, event: ev.Event) -> None:
    p = event.payload
    items = [
        CompensationItem(
            step=str(i["step"]),
            run=int(i["run"]),
            target=str(i["compensation"]),
            target_run=int(i["compensation_run"]),
        )
        for i in p.get("plan", [])
    ]
    state.compensation = Compensation(outcome=str(p.get("outcome") or FAILED), items=items)
    for item in items:
        state.run_counts[item.target] = max(state.run_counts.get(item.target, 0), item.target_run)


def _item(state: ExecutionState, index: Any) -> CompensationItem | None:
    comp = state.compensation
    return None if comp is None else fs.item_at(comp.items, index)


def apply_issued(state: ExecutionState, command: Command, index: Any) -> None:
    item = _item(state, index)
    if item is not None:
        item.issued(command.command_id, command.attempt)


def owns(state: ExecutionState, command: Command) -> CompensationItem | None:
    """The item whose live command `command` is, if any."""
    held = state.compensation
    return None if held is None else fs.running(held.items, command.command_id)


def apply_retry_scheduled(state: ExecutionState, event: ev.Event) -> None:
    item = _item(state, event.payload.get("compensation"))
    if item is not None:
        item.retry(float(event.payload["not_before"]))


def apply_completed(state: ExecutionState, event: ev.Event) -> None:
    item = _item(state, event.payload.get("index"))
    if item is not None:
        item.completed(event.payload.get("result"))


def apply_failed(state: ExecutionState, event: ev.Event) -> None:
    item = _item(state, event.payload.get("index"))
    if item is not None:
        item.failed(event.payload.get("error"))


def summary(state: ExecutionState) -> dict[str, Any] | None:
    """What status readers show: `{compensating, outcome, items: [...]}`, None for a run
    that never compensated."""
    comp = state.compensation
    if comp is None:
        return None
    return {
        "compensating": comp.active and not state.terminal,
        "outcome": comp.outcome,
        "items": [
            {
                "step": i.step,
                "run": i.run,
                "compensation": i.target,
                "status": i.status,
                "attempt": i.attempt,
                "result": i.result,
                "error": i.error,
            }
            for i in comp.items
        ],
    }
