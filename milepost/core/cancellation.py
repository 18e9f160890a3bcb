"""Cancellation with a deadline (DSL 10): a cancel request stops new work at once, and
`executor.spec.cancel_grace` after it the engine abandons every attempt still live, so a
worker that never stops cannot keep a cancelled run from ending. Pure: time comes in."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from milepost.core import events as ev
from milepost.core import state as st
from milepost.playbook import model

CANCELLED_KIND = "cancelled"
"""The error kind of an attempt a cancel of its run ended (stopped, abandoned, never run)."""
STOPPED = {
    "kind": CANCELLED_KIND,
    "retryable": False,
    "message": "execution cancelled: the attempt was stopped",
}
"""The error a worker reports for an attempt it stopped because the run was cancelled."""
CHILD_CANCELLED = "child_cancelled"
"""The error `code` of a `playbook` task whose child ended CANCELLED (kind `playbook`, DSL
3.5): when its own run's cancel was asked, the step was stopped by that cancel, reaching
it through the child, and exits CANCELLED as a stopped attempt's step does; else it
failed."""


def stopped_by_cancel(state: st.ExecutionState, error: Mapping[str, Any]) -> bool:
    """Whether a step's failure is its run's cancel: an attempt stopped, abandoned or never
    run (kind `cancelled`), or a child the cancel reached first, however the reports
    raced (a worker hears of its run's cancel at its next heartbeat, its tool of the
    child's end as soon as the child ends)."""
    if not state.cancel_requested:
        return False
    return error.get("kind") == CANCELLED_KIND or error.get("code") == CHILD_CANCELLED


def abandoned_error(grace: float) -> dict[str, object]:
    """The error of an attempt the engine abandoned at the end of the grace."""
    return {
        "kind": CANCELLED_KIND,
        "retryable": False,
        "message": f"execution cancelled: attempt abandoned after the cancel grace ({grace:g}s)",
    }


def request_payload(actor: str | None, cause: str | None = None) -> dict[str, str]:
    """The payload of `execution.cancel_requested`: empty when nobody is named, so a run
    cancelled the old way logs what it always did."""
    payload = {} if actor is None else {"actor": actor}
    if cause is not None:
        payload["cause"] = cause
    return payload


def request(
    event_id: int,
    execution_id: int,
    now: float,
    actor: str | None = None,
    cause: str | None = None,
) -> ev.Event:
    """The `execution.cancel_requested` of a cancel asked by `actor` (none named: the
    payload is empty, as a run cancelled the old way logs), for `cause` (a parent's).
    The same event whoever appends it: the engine under the run's lock, or a process
    that appends it behind the run's driver (which marks it first: `mark_cancel`)."""
    return ev.new_event(
        event_id,
        execution_id,
        ev.EXECUTION_CANCEL_REQUESTED,
        now,
        payload=request_payload(actor, cause),
    )


def cancel_stops_work(state: st.ExecutionState) -> bool:
    """Whether a cancel keeps this run's commands from running. Not once its status is
    settled: the commands then are its compensations (DSL 10.5) or its teardown, which are
    how it ends, and a cancel asked while they run does not stop them."""
    return state.cancel_requested and state.compensation is None and state.teardown is None


def mark_cancel(state: st.ExecutionState, event: ev.Event) -> ev.Event:
    """A cancel asked once the run's status is settled, marked so the store's projection
    keeps taking claims of its final steps (`store.projection`); other events unchanged."""
    if event.event_type != ev.EXECUTION_CANCEL_REQUESTED:
        return event
    if state.teardown is not None:
        mark = "tearing_down"
    elif state.compensation is not None:
        mark = "compensating"
    else:
        return event
    return replace(event, meta={**event.meta, mark: True})


def child_cause(parent_id: int, why: str = "cancelled") -> str:
    """The `cause` of a child's cancel: its parent's (`parent 12 cancelled`), or why
    nobody waits for it any more (`parent 12 failed`, `parent 12 step 'call' stopped
    waiting`)."""
    return f"parent {parent_id} {why}"


def deadline(state: st.ExecutionState, playbook: model.Playbook) -> float | None:
    """When the live attempts of a cancelled run are abandoned; None when not cancelling,
    or once compensating or tearing down: the commands then are its final steps, which a
    cancel leaves alone (DSL 10.5, `core.final_step_state`)."""
    if not cancel_stops_work(state) or state.terminal or state.cancel_requested_at is None:
        return None
    return state.cancel_requested_at + playbook.executor.cancel_grace


RECHECK = 1.0
"""Seconds between two looks at a grace that has ended with attempts still live (the
engine abandons them when woken; should that fail, it is woken again, not in a loop)."""


def timer(state: st.ExecutionState, playbook: model.Playbook, now: float) -> float | None:
    """When decide asks to be woken for the grace's end: then, or soon if it is past."""
    at = deadline(state, playbook) if state.commands else None
    if at is None:
        return None
    return at if at > now else now + RECHECK


def overdue(state: st.ExecutionState, playbook: model.Playbook, now: float) -> bool:
    """The grace has run out and some attempt is still live."""
    at = deadline(state, playbook)
    return at is not None and now >= at and bool(state.commands)


def abandoned(
    state: st.ExecutionState,
    playbook: model.Playbook,
    now: float,
    new_id: Callable[[], int],
    epochs: Mapping[int, int],
) -> list[ev.Event]:
    """A `command.failed` (kind `cancelled`) for every command the state still waits for,
    each with its claim's epoch (`epochs`, 0 for one without a claim). The caller decides
    when: the grace ran out (`overdue`), or nothing drives the run any more."""
    return settled(state, abandoned_error(playbook.executor.cancel_grace), now, new_id, epochs)


def settled(
    state: st.ExecutionState,
    error: dict[str, Any],
    now: float,
    new_id: Callable[[], int],
    epochs: Mapping[int, int],
) -> list[ev.Event]:
    """A `command.failed` of `error` for every command the state still waits for (the
    engine settles what no report will: an abandoned attempt, a run whose decisions raised),
    each with its claim's epoch (`epochs`, 0 for one without a claim)."""
    return [
        failed_event(
            state.execution_id,
            cid,
            cmd.step,
            (cmd.run, cmd.index, cmd.attempt),
            epochs.get(cid, 0),
            error,
            new_id(),
            now,
        )
        for cid, cmd in sorted(state.commands.items())
    ]


def failed_event(
    execution_id: int,
    command_id: int,
    step: str,
    where: tuple[int, int, int],
    epoch: int,
    error: Mapping[str, Any],
    event_id: int,
    now: float,
    *,
    worker_id: str | None = None,
    source: str = "server",
) -> ev.Event:
    """The `command.failed` the engine writes to settle a command no report will (of a
    cancelled run; of a stalled run or past the `default_timeout`, from the reconciler:
    `source`), `worker_id` holding its claim at `epoch`. Marked `ev.SETTLES`: written only
    while its row is still open at that epoch."""
    run, index, attempt = where
    payload = {
        "command_id": command_id,
        "run": run,
        "index": index,
        "attempt": attempt,
        "epoch": epoch,
        "error": dict(error),
    }
    # its cause is the command it settles, as for a lost lease
    return ev.new_event(
        event_id,
        execution_id,
        ev.COMMAND_FAILED,
        now,
        step=step,
        payload=payload,
        worker_id=worker_id,
        meta={"epoch": epoch, "source": source, ev.SETTLES: True},
        parent_event_id=command_id,
    )
