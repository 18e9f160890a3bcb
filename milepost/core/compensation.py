"""Compensating a run that ends FAILED or CANCELLED (DSL 10.5), as decisions.

When nothing runs any more, before the terminal event: each completed run of a step naming
`spec.compensation` gets that step run once, newest completion first, one at a time, with
`compensation = {step, run, result}` in its render context (`core.work`). The compensation
step's `spec` applies (timeout in the worker, `spec.retry` here); its `next` and `set` are
ignored: a compensation moves no step and no ctx. A failing compensation is recorded and
the next one still runs; the run then ends with the status and error it was going to end
with. The fold is in `core.compensation_state`.
"""

from __future__ import annotations

from typing import Any, Protocol

from milepost.core import compensation_state as cs
from milepost.core import events as ev
from milepost.core import policies
from milepost.core import state as st
from milepost.playbook import model


class Emitter(Protocol):
    """What `decide` hands a phase: the state, the time, ids, and where events go."""

    state: st.ExecutionState
    now: float

    def new_id(self) -> int: ...

    def emit(
        self,
        event_type: str,
        step: str | None = None,
        status: str | None = None,
        event_id: int | None = None,
        **payload: Any,
    ) -> None: ...

    def wake(self, at: float) -> None: ...

    def issue(self, step: str, run: int, index: int, attempt: int, **extra: Any) -> None: ...


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


def proceed(out: Emitter, playbook: model.Playbook, outcome: str) -> bool:
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
    if item.command_id is not None:
        return True  # its command is out: wait for the report
    if item.reported is not None:
        _decide_report(out, playbook, index, item)
    elif item.status == cs.PENDING:
        _issue(out, index, item, 1)
    elif item.retry_at is not None:
        if item.retry_at <= out.now:
            _issue(out, index, item, item.attempt + 1)
        else:
            out.wake(item.retry_at)
    return True


def _decide_report(out: Emitter, playbook: model.Playbook, index: int, item: cs.Item) -> None:
    assert item.reported is not None
    ok, value = item.reported
    # the event's step is the compensation step; `undoes` names the step run it undid
    where: dict[str, Any] = {"index": index, "undoes": {"step": item.step, "run": item.run}}
    if ok:
        out.emit(ev.COMPENSATION_COMPLETED, item.target, **where, result=value)
        return
    error = dict(value) if isinstance(value, dict) else {"message": str(value)}
    spec = playbook.steps[item.target].spec.retry
    if policies.retryable(spec, error.get("kind"), item.attempt):
        wait = policies.retry_wait(spec, item.attempt, error)
        out.emit(
            ev.COMMAND_RETRY_SCHEDULED,
            item.target,
            run=item.target_run,
            index=st.NO_INDEX,
            attempt=item.attempt + 1,
            not_before=out.now + wait,
            error=error,
            compensation=index,
        )
        return
    message = str(error.get("message") or "failed")
    error.update(
        kind=error.get("kind", "error"),
        message=message,
        reason=f"compensation '{item.target}' of step '{item.step}' failed: {message}",
    )
    out.emit(ev.COMPENSATION_FAILED, item.target, **where, error=error)


def _issue(out: Emitter, index: int, item: cs.Item, attempt: int) -> None:
    # the compensation step's `spec` applies (DSL 10.5): its pool and lease, as for a step
    out.issue(item.target, item.target_run, st.NO_INDEX, attempt, compensation=index)
