"""Deciding on a run's final steps (`core.final_step_state`): its compensations
(`core.compensation`) and its teardown (`core.teardown`) run the same way, one step at a
time: the first attempt issued, the report awaited, a failed attempt retried under the
step's own `spec.retry` (a lost worker's under the lost attempts, as for any step), then
the outcome settled by the phase's own event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from milepost.core import events as ev
from milepost.core import final_step_state as fs
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


@dataclass(frozen=True, slots=True)
class Ends:
    """How a final step's outcome is logged: its two event types, the fields they carry
    (`where`) and the start of a failure's reason (`compensation 'refund' of step 'charge'
    failed`)."""

    completed: str
    failed: str
    where: dict[str, Any]
    reason: str


def advance(
    out: Emitter, playbook: model.Playbook, work: fs.Work, marker: dict[str, Any], ends: Ends
) -> None:
    """One decision on the final step being run: issue its first attempt, wait for its
    report, retry a failed attempt, or settle it (`ends`). `marker`: what its commands and
    retry timers carry (`{"compensation": 2}`), so the fold knows whose they are. The step's
    `spec` applies (its pool and lease through `issue`, its timeout in the worker)."""
    if work.command_id is not None:
        return  # its command is out: wait for the report
    if work.reported is not None:
        ok, value = work.reported
        if ok:
            out.emit(ends.completed, work.target, **ends.where, result=value)
            return
        error = dict(value) if isinstance(value, dict) else {"message": str(value)}
        spec = playbook.steps[work.target].spec.retry
        if policies.retryable(spec, error.get("kind"), work.attempt):
            out.emit(
                ev.COMMAND_RETRY_SCHEDULED,
                work.target,
                run=work.target_run,
                index=st.NO_INDEX,
                attempt=work.attempt + 1,
                not_before=out.now + policies.retry_wait(spec, work.attempt, error),
                error=error,
                **marker,
            )
            return
        message = str(error.get("message") or "failed")
        failed = {
            **error,
            "kind": error.get("kind", "error"),
            "message": message,
            "reason": f"{ends.reason}: {message}",
        }
        out.emit(ends.failed, work.target, **ends.where, error=failed)
    elif work.status == fs.PENDING:
        out.issue(work.target, work.target_run, st.NO_INDEX, 1, **marker)
    elif work.retry_at is not None:
        if work.retry_at <= out.now:
            out.issue(work.target, work.target_run, st.NO_INDEX, work.attempt + 1, **marker)
        else:
            out.wake(work.retry_at)
