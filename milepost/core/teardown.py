"""Tearing down after a run, as decisions (`executor.spec.teardown`, docs/language.md).

Once the run's outcome is decided, whatever it is (it completed; it failed or was
cancelled, after its compensations), and before its terminal event: each step
`executor.spec.teardown` names runs once, in the order listed, one at a time, with
`teardown = {status, error}` (the run's) in its render context (`core.work`), whatever the
previous one did. Its `spec` applies (timeout in the worker, `spec.retry` here); its `next`
and `set` are ignored. Then the run ends with the status and error decided before: a
teardown step that fails (or is lost, or stopped) is recorded, as its step status and in
the terminal event's `teardown`, and changes nothing else. A cancel asked meanwhile stops
nothing (`core.cancellation.cancel_stops_work`). The fold is in `core.teardown_state`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from milepost.core import cancellation, final_steps
from milepost.core import events as ev
from milepost.core import final_step_state as fs
from milepost.core import state as st
from milepost.playbook import model


def begin(
    out: final_steps.Emitter, playbook: model.Playbook, status: str, error: dict[str, Any] | None
) -> bool:
    """Start tearing down a run whose outcome is `status` (`error`: a FAILED run's); False
    when the playbook names no teardown step (the run may end at once)."""
    if not playbook.executor.teardown:
        return False
    out.emit(ev.TEARDOWN_STARTED, **started_payload(out.state, playbook, status, error))
    return True


def started_payload(
    state: st.ExecutionState, playbook: model.Playbook, status: str, error: dict[str, Any] | None
) -> dict[str, Any]:
    steps = [
        {"step": name, "run": state.run_counts.get(name, 0) + 1}
        for name in playbook.executor.teardown
    ]
    return {"outcome": status, "error": error if status == st.FAILED else None, "steps": steps}


def proceed(out: final_steps.Emitter, playbook: model.Playbook) -> bool:
    """Move tearing down on by one decision; False once every teardown step has run and
    the run may end (`terminal`)."""
    td = out.state.teardown
    current = td.current if td is not None else None
    if current is None:
        return False
    index, item = current
    where: dict[str, Any] = {"index": index, "run": item.target_run}
    reason = f"teardown step '{item.target}' failed"
    ends = final_steps.Ends(ev.TEARDOWN_COMPLETED, ev.TEARDOWN_FAILED, where, reason)
    final_steps.advance(out, playbook, item, {"teardown": index}, ends)
    return True


def terminal(
    status: str, error: dict[str, Any] | None, torn: list[dict[str, Any]] | None
) -> tuple[str, dict[str, Any]]:
    """The terminal event (type, payload) of a run ending `status`; `torn`: what its
    teardown steps did (None: it had none, and the payload is what it always was)."""
    extra = {} if torn is None else {"teardown": torn}
    if status == st.CANCELLED:
        return ev.EXECUTION_CANCELLED, {"reason": "cancel requested", **extra}
    if status == st.FAILED:
        failure = error or {"message": "execution failed"}
        return ev.EXECUTION_FAILED, {"error": failure, "reason": failure.get("reason"), **extra}
    return ev.EXECUTION_COMPLETED, extra


def after_engine_error(
    state: st.ExecutionState,
    playbook: model.Playbook | None,
    error: dict[str, Any],
    now: float,
    new_id: Callable[[], int],
    epochs: Mapping[int, int],
) -> list[ev.Event]:
    """What ends a run whose decisions raised (`error`, kind `engine`), so that it still
    tears down: before tearing down, every live command settled (`command.failed` with
    `error`: nothing decides on its report now) and `teardown.started` with FAILED; while
    tearing down, the terminal event of the status decided before, the steps not done
    recorded as failed with `error`. [] when the playbook names no teardown step (or is
    None: it cannot be read): the caller ends the run FAILED at once, as it always did."""
    td = state.teardown
    if td is not None:
        torn = [
            {**o, "status": fs.FAILED, "error": error} if o["status"] not in fs.DONE else o
            for o in td.outcomes()
        ]
        event_type, payload = terminal(td.status, td.error, torn)
        return [_event(state, new_id(), event_type, now, payload)]
    if playbook is None or not playbook.executor.teardown:
        return []
    settled = cancellation.settled(state, error, now, new_id, epochs)
    payload = started_payload(state, playbook, st.FAILED, error)
    return [*settled, _event(state, new_id(), ev.TEARDOWN_STARTED, now, payload)]


def failed_at_once(
    execution_id: int, error: dict[str, Any], cause: int | None, event_id: int, now: float
) -> ev.Event:
    """The `execution.failed` of a run whose decisions raised (`error`, kind `engine`) and
    that does not tear down (`after_engine_error` gave nothing): it ends at once, caused
    by what was decided on."""
    return ev.new_event(
        event_id,
        execution_id,
        ev.EXECUTION_FAILED,
        now,
        payload={"error": error, "reason": error["reason"]},
        parent_event_id=cause,
    )


def _event(
    state: st.ExecutionState, event_id: int, event_type: str, now: float, payload: dict[str, Any]
) -> ev.Event:
    # caused by the last event decided on, as any execution event
    return ev.new_event(
        event_id,
        state.execution_id,
        event_type,
        now,
        payload=payload,
        parent_event_id=state.causes.last,
    )
