"""The fold of tearing down (`executor.spec.teardown`, docs/language.md): the steps a run
runs once each after its outcome is decided, whatever it is, and how far that got.

Once a run's outcome is decided (it completed, failed or was cancelled; after its
compensations, when there are any) and before its terminal event, the log records:
- `teardown.started` `{outcome, error, steps: [{step, run}]}`: the status (and, FAILED,
  the error) the run ends with, settled before any teardown step runs, and the teardown steps
  in the order they run;
- per step, its commands: `command.issued` (and `command.retry_scheduled`) with
  `teardown: <index in steps>`, the worker's reports (or `command.lease_expired`) as for
  any command;
- per step, its outcome (step: the teardown step): `teardown.completed` `{index, run,
  result}` or `teardown.failed` `{index, run, error}`;
- then the terminal event of `status`, whose payload lists `teardown: [{step, status,
  error}]`.
Dedicated events, as for compensations (`core.compensation_state`): a `step.exit` would move
the run's failure, `completed_runs`, ctx and arcs. A teardown step's outcome is its step
status and result (`step_status`, `results`: it is the step's only run), which is how
`status`, `describe` and the UI's graph show it; nothing else of the run moves.

The state is `ExecutionState.teardown` (None until tearing down starts, a
`final_step_state.Teardown`, kept there so that `core.state` imports no module that reads
the state back): a run resumed after
a crash goes on with the next step and never runs one twice (a command in flight at the
crash is re-delivered like any command).
"""

from __future__ import annotations

from typing import Any

from milepost.core import events as ev
from milepost.core import final_step_state as fs
from milepost.core.state import Command, ExecutionState


def tearing_down(state: ExecutionState) -> bool:
    """True while teardown steps are still to run (`milepost status`: `tearing_down`)."""
    return state.teardown is not None and state.teardown.active and not state.terminal


def context_of(state: ExecutionState, command_id: int) -> dict[str, Any] | None:
    """`teardown = {status, error}` (the run's) for the render context of a teardown
    step's command, None for any other command."""
    td = state.teardown
    if td is None or not any(i.command_id == command_id for i in td.items):
        return None
    return td.context()


# -- fold ------------------------------------------------------------------------------------


def apply_started(state: ExecutionState, event: ev.Event) -> None:
    p = event.payload
    error = p.get("error")
    items = [fs.Work(target=str(i["step"]), target_run=int(i["run"])) for i in p.get("steps", [])]
    state.teardown = fs.Teardown(
        status=str(p.get("outcome") or fs.COMPLETED),
        error=error if isinstance(error, dict) else None,
        items=items,
    )
    for item in items:
        state.run_counts[item.target] = max(state.run_counts.get(item.target, 0), item.target_run)


def _item(state: ExecutionState, index: Any) -> fs.Work | None:
    td = state.teardown
    return None if td is None else fs.item_at(td.items, index)


def apply_issued(state: ExecutionState, command: Command, index: Any) -> None:
    item = _item(state, index)
    if item is not None:
        item.issued(command.command_id, command.attempt)
        state.step_status[item.target] = fs.RUNNING


def owns(state: ExecutionState, command: Command) -> fs.Work | None:
    """The teardown step whose live command `command` is, if any."""
    held = state.teardown
    return None if held is None else fs.running(held.items, command.command_id)


def apply_retry_scheduled(state: ExecutionState, event: ev.Event) -> None:
    item = _item(state, event.payload.get("teardown"))
    if item is not None:
        item.retry(float(event.payload["not_before"]))


def apply_completed(state: ExecutionState, event: ev.Event) -> None:
    item = _item(state, event.payload.get("index"))
    if item is not None:
        item.completed(event.payload.get("result"))
        state.step_status[item.target] = fs.COMPLETED
        state.results[item.target] = item.result


def apply_failed(state: ExecutionState, event: ev.Event) -> None:
    item = _item(state, event.payload.get("index"))
    if item is not None:
        item.failed(event.payload.get("error"))
        state.step_status[item.target] = fs.FAILED


def apply_ended(state: ExecutionState, event: ev.Event) -> None:
    """The terminal event's `teardown` is what each teardown step came to: a step an engine
    error cut short (`core.teardown.after_engine_error`) shows as it is recorded there."""
    for outcome in event.payload.get("teardown") or ():
        if isinstance(outcome, dict) and outcome.get("step"):
            state.step_status[str(outcome["step"])] = str(outcome.get("status"))


def summary(state: ExecutionState) -> dict[str, Any] | None:
    """What status readers show: `{tearing_down, status, items: [{step, run, status,
    attempt, result, error}]}`, None for a run that never started tearing down."""
    td = state.teardown
    if td is None:
        return None
    return {
        "tearing_down": tearing_down(state),
        "status": td.status,
        "items": [
            {
                "step": i.target,
                "run": i.target_run,
                "status": i.status,
                "attempt": i.attempt,
                "result": i.result,
                "error": i.error,
            }
            for i in td.items
        ],
    }
