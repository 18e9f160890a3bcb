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

The state is `ExecutionState.compensation` (None until compensating starts): the fold knows
which items are done, so a run resumed after a crash goes on with the next one and never
runs one twice (a command in flight at the crash is re-delivered like any command).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from milepost.core import events as ev

if TYPE_CHECKING:  # state imports this module: the types only, to keep the import one way
    from milepost.core.state import Command, ExecutionState

PENDING = "PENDING"
RUNNING = "RUNNING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"

LOST_MESSAGE = "worker lost (lease expired)"


def lost_error(payload: dict[str, Any]) -> dict[str, Any]:
    """The error of an attempt whose claim lapsed (`command.lease_expired`'s payload): a
    step's attempt (`core.state`) or a compensation's."""
    return {"kind": "lost", "message": payload.get("message") or LOST_MESSAGE, "retryable": True}


@dataclass(slots=True)
class Item:
    """One compensation: the step run it undoes and the run of the compensation step."""

    step: str
    """The step whose completed run is undone."""
    run: int
    target: str
    """Its `spec.compensation`: the step that undoes it."""
    target_run: int
    """The compensation step's run (1 first): its idempotency key differs per item."""
    status: str = PENDING
    command_id: int | None = None
    """The live command of this item, if one is out."""
    attempt: int = 0
    """The attempt of the latest command issued."""
    reported: tuple[bool, Any] | None = None
    """The worker's report not yet decided on: (ok, result or error)."""
    retry_at: float | None = None
    result: Any = None
    error: dict[str, Any] | None = None


@dataclass(slots=True)
class Compensation:
    outcome: str
    """FAILED or CANCELLED: the status the run ends with once every item is done."""
    items: list[Item] = field(default_factory=list)

    @property
    def current(self) -> tuple[int, Item] | None:
        """The item to work on (they run one at a time, in plan order); None when all are done."""
        for index, item in enumerate(self.items):
            if item.status not in (COMPLETED, FAILED):
                return index, item
        return None

    @property
    def active(self) -> bool:
        return self.current is not None


def compensating(state: ExecutionState) -> bool:
    """True while compensations are still to run (`milepost status`: `compensating`)."""
    return state.compensation is not None and state.compensation.active


def cancel_stops_work(state: ExecutionState) -> bool:
    """Whether a cancel keeps this run's commands from running. Not its compensations
    (DSL 10.5): they are how a cancelled run ends, and a cancel asked while they run
    does not stop them."""
    return state.cancel_requested and state.compensation is None


def mark_cancel(state: ExecutionState, event: ev.Event) -> ev.Event:
    """A cancel asked while compensating, marked so the store's projection keeps taking
    claims of the compensations (`store.projection`); other events unchanged."""
    if event.event_type != ev.EXECUTION_CANCEL_REQUESTED or state.compensation is None:
        return event
    return replace(event, meta={**event.meta, "compensating": True})


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
        Item(
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


def _item(state: ExecutionState, index: Any) -> Item | None:
    comp = state.compensation
    if comp is None or index is None or not 0 <= int(index) < len(comp.items):
        return None
    return comp.items[int(index)]


def apply_issued(state: ExecutionState, command: Command, index: Any) -> None:
    item = _item(state, index)
    if item is None:
        return
    item.status = RUNNING
    item.command_id = command.command_id
    item.attempt = command.attempt
    item.retry_at = None
    item.reported = None


def owns(state: ExecutionState, command: Command) -> Item | None:
    """The item whose live command `command` is, if any."""
    comp = state.compensation
    if comp is None:
        return None
    for item in comp.items:
        if item.command_id == command.command_id and item.status == RUNNING:
            return item
    return None


def apply_report(item: Item, event: ev.Event) -> None:
    """A worker's report (or the lapse of its claim) for the item's live command."""
    p = event.payload
    item.command_id = None
    if event.event_type == ev.COMMAND_COMPLETED:
        item.reported = (True, p.get("result"))
    elif event.event_type == ev.COMMAND_FAILED:
        item.reported = (False, p.get("error") or {})
    else:  # command.lease_expired
        item.reported = (False, lost_error(p))


def apply_retry_scheduled(state: ExecutionState, event: ev.Event) -> None:
    item = _item(state, event.payload.get("compensation"))
    if item is not None:
        item.reported = None
        item.retry_at = float(event.payload["not_before"])


def apply_completed(state: ExecutionState, event: ev.Event) -> None:
    item = _item(state, event.payload.get("index"))
    if item is not None:
        item.status, item.result, item.reported = COMPLETED, event.payload.get("result"), None


def apply_failed(state: ExecutionState, event: ev.Event) -> None:
    item = _item(state, event.payload.get("index"))
    if item is not None:
        item.status, item.error, item.reported = FAILED, event.payload.get("error"), None


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
