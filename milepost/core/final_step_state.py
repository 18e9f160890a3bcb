"""The fold of a run's final steps: the steps it runs one at a time, each exactly once,
after its outcome is decided and before its terminal event. They are its compensations
(DSL 10.5, `core.compensation_state`) and then its teardown steps (`core.teardown_state`).

Each is one `Work`: its command is issued with the phase's marker in the payload
(`compensation: <index>` or `teardown: <index>`), reported like any command (or lost),
retried under the step's own `spec.retry`, then settled by the phase's own outcome event.
None of it moves a step run of the workflow. Once a run has started either phase its
status is settled, so a cancel asked from then on stops nothing
(`core.cancellation.cancel_stops_work`).

The records here are the ones `core.state.ExecutionState` holds (its `compensation` and
`teardown`): this module does not read the state back, so the state's module can import it.
The fold of each phase is in its own module, which does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from milepost.core import events as ev

PENDING = "PENDING"
RUNNING = "RUNNING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
DONE = frozenset({COMPLETED, FAILED})

LOST_MESSAGE = "worker lost (lease expired)"

CANCEL_MARKS = ("compensating", "tearing_down")
"""The `meta` flags of a cancel asked once the run's status was settled (`mark_cancel`)."""


def lost_error(payload: dict[str, Any]) -> dict[str, Any]:
    """The error of an attempt whose claim lapsed (`command.lease_expired`'s payload): a
    step's attempt (`core.fold`) or a final step's."""
    return {"kind": "lost", "message": payload.get("message") or LOST_MESSAGE, "retryable": True}


@dataclass(slots=True)
class Work:
    """One run of a final step: its live command, its attempts and its outcome."""

    target: str
    """The step that runs."""
    target_run: int
    """Its run (1 first): its idempotency key differs per run."""
    status: str = PENDING
    command_id: int | None = None
    """The live command, if one is out."""
    attempt: int = 0
    """The attempt of the latest command issued."""
    reported: tuple[bool, Any] | None = None
    """The worker's report not yet decided on: (ok, result or error)."""
    retry_at: float | None = None
    result: Any = None
    error: dict[str, Any] | None = None

    def issued(self, command_id: int, attempt: int) -> None:
        self.status = RUNNING
        self.command_id = command_id
        self.attempt = attempt
        self.retry_at = None
        self.reported = None

    def report(self, event: ev.Event) -> None:
        """A worker's report (or the lapse of its claim) for the live command."""
        p = event.payload
        self.command_id = None
        if event.event_type == ev.COMMAND_COMPLETED:
            self.reported = (True, p.get("result"))
        elif event.event_type == ev.COMMAND_FAILED:
            self.reported = (False, p.get("error") or {})
        else:  # command.lease_expired
            self.reported = (False, lost_error(p))

    def retry(self, not_before: float) -> None:
        self.reported = None
        self.retry_at = not_before

    def completed(self, result: Any) -> None:
        self.status, self.result, self.reported = COMPLETED, result, None

    def failed(self, error: dict[str, Any] | None) -> None:
        self.status, self.error, self.reported = FAILED, error, None


def current(items: list[Any]) -> tuple[int, Any] | None:
    """The item to work on (they run one at a time, in order); None when all are done."""
    for index, item in enumerate(items):
        if item.status not in DONE:
            return index, item
    return None


W = TypeVar("W", bound="Work")


def running(items: Sequence[W], command_id: int) -> W | None:
    """The final step whose live command `command_id` is, if any."""
    return next((w for w in items if w.command_id == command_id and w.status == RUNNING), None)


def item_at(items: list[Any], index: Any) -> Any:
    """The item at `index` of an event's payload, None for one out of range."""
    if index is None or not 0 <= int(index) < len(items):
        return None
    return items[int(index)]


def stops_nothing(event: ev.Event) -> bool:
    """A cancel request `mark_cancel` marked: the store keeps taking the run's claims."""
    return any(event.meta.get(mark) for mark in CANCEL_MARKS)


@dataclass(slots=True, kw_only=True)
class CompensationItem(Work):
    """One compensation (`core.compensation_state`): the step run it undoes and the run of
    the compensation step (`target`, `target_run`)."""

    step: str
    """The step whose completed run is undone."""
    run: int


@dataclass(slots=True)
class Compensation:
    """A run's compensations (`ExecutionState.compensation`)."""

    outcome: str
    """FAILED or CANCELLED: the status the run ends with once every item is done."""
    items: list[CompensationItem] = field(default_factory=list)

    @property
    def current(self) -> tuple[int, CompensationItem] | None:
        """The item to work on (they run one at a time, in plan order); None when all are done."""
        return current(self.items)

    @property
    def active(self) -> bool:
        return self.current is not None


@dataclass(slots=True)
class Teardown:
    """A run's teardown steps (`ExecutionState.teardown`, `core.teardown_state`)."""

    status: str
    """COMPLETED, FAILED or CANCELLED: the status the run ends with, whatever teardown does."""
    error: dict[str, Any] | None
    """The error it ends FAILED with; None for another status."""
    items: list[Work] = field(default_factory=list)

    @property
    def current(self) -> tuple[int, Work] | None:
        return current(self.items)

    @property
    def active(self) -> bool:
        return self.current is not None

    def context(self) -> dict[str, Any]:
        """`teardown = {status, error}` in a teardown step's render context."""
        return {"status": self.status, "error": self.error}

    def outcomes(self) -> list[dict[str, Any]]:
        """`[{step, status, error}]`: what the terminal event records of each step."""
        return [{"step": i.target, "status": i.status, "error": i.error} for i in self.items]
