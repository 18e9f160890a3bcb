"""What a worker needs to run one command, and what it reports back."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from milepost import ids
from milepost.core import compensation_state as cs
from milepost.core import context as cx
from milepost.core import events as ev
from milepost.core import state as st
from milepost.core import teardown_state as td
from milepost.core import tracecontext
from milepost.core.logs import Captured
from milepost.playbook import model, render
from milepost.records import record


@record
class WorkItem:
    """One attempt of one step (one loop iteration), with its render context."""

    command_id: int
    execution_id: int
    step: str
    run: int
    index: int
    attempt: int
    idempotency_key: str
    context: dict[str, Any]
    """The render context at issue time (DSL 9.2), loop variables included."""
    args: dict[str, Any] = field(default_factory=dict)
    """Extra input from a legacy arc `args`."""
    epoch: int = 0
    approved_digest: str | None = None
    """The digest of the call people approved for this command (`spec.approval`): the
    attempt renders its call again and refuses to run a different one."""
    approval_expires_at: float | None = None
    """When that approval expires (None: never): an attempt that starts at or after it
    refuses to run its tool, however long the command waited to be claimed."""
    traceparent: str | None = None
    """W3C trace context of the run (`core.tracecontext`): the attempt's span is its child."""

    @property
    def operation_key(self) -> str:
        """DSL 10.4: the same for every attempt of this step run and loop index."""
        return ids.operation_key(
            self.execution_id,
            self.step,
            self.run,
            None if self.index == st.NO_INDEX else self.index,
        )


@record
class AttemptResult:
    """What one attempt produced (DSL 5, 7): a result and the ctx writes to commit, or an error."""

    ok: bool
    result: Any = None
    ctx: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    failed_ok: bool = False
    """The attempt succeeded only because a policy let a task error through."""
    duration_ms: float = 0.0
    usage: list[dict[str, Any]] = field(default_factory=list)
    """What its tools reported using, summed per (provider, model) (`core.usage`)."""
    logs: tuple[Captured, ...] = ()
    """What its tools printed, per stream, redacted and capped: reported beside its event,
    never in it (`core.logs`)."""


@record
class TaskRetry:
    """A task of a running attempt failed and its policy retries it (DSL 5): what the worker
    reports at once (`retry_note_events`), before it waits inside the attempt."""

    task: str | None
    """The task (None: the step's only tool)."""
    error: dict[str, Any]
    """The failed execution's error, redacted."""
    attempt: int
    """The task's execution the wait leads to (2 after the first failed)."""
    attempts: int
    """The policy's `attempts`."""
    delay: float
    """Seconds the worker waits before it runs the task again."""
    logs: tuple[Captured, ...] = ()
    """What the failed execution printed (its traceback too), redacted and capped: stored
    beside the note as a report's are, so they are readable while the retry waits."""


def work_item(
    state: st.ExecutionState, playbook: model.Playbook, command: st.Command, epoch: int = 0
) -> WorkItem:
    """Build the work item for a live command from the current state.

    Its context holds what the step's attempts read (`playbook.reads`), not every step's
    result.
    """
    sr = state.running.get(command.step)
    context, args = attempt_context(state, playbook, command.step, sr, command.index)
    undoing = cs.context_of(state, command.command_id)
    if undoing is not None:  # DSL 10.5: the step run this compensation undoes
        context["compensation"] = undoing
    ending = td.context_of(state, command.command_id)
    if ending is not None:  # the run's status and error, which this teardown step follows
        context["teardown"] = ending
    approval = None
    if sr is not None and sr.approval_id is not None:
        approval = state.approvals.get(sr.approval_id)
    return WorkItem(
        command_id=command.command_id,
        execution_id=state.execution_id,
        step=command.step,
        run=command.run,
        index=command.index,
        attempt=command.attempt,
        idempotency_key=command.idempotency_key,
        context=context,
        args=args,
        epoch=epoch,
        approved_digest=approval.digest_of(command.index) if approval is not None else None,
        approval_expires_at=approval.expires_at if approval is not None else None,
        traceparent=tracecontext.command_traceparent(state.execution_id, state.traceparent),
    )


def attempt_context(
    state: st.ExecutionState,
    playbook: model.Playbook,
    step_name: str,
    sr: st.StepRun | None,
    index: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The render context of one attempt of `step_name` (loop index `index`) and its legacy
    arc args: what its command carries, and what an approval request renders the call with."""
    names = playbook.reads_of(step_name).attempt
    if names is not None and sr is not None and sr.args:
        args_read = render.names_read(sr.args)  # a legacy arc's args render with the input
        names = None if args_read is None else names | args_read
    context = cx.base_context(state, names)
    # a snapshot of ctx: parallel writes landing later must not change what this attempt saw
    context["ctx"] = dict(state.ctx)
    args: dict[str, Any] = {}
    if sr is not None:
        args = sr.args
        step = playbook.steps[step_name]
        if sr.is_loop and step.loop is not None and index != st.NO_INDEX:
            loop_vars = cx.iteration_vars(sr, step.loop.iterator, index)
            context = cx.overlay(context, loop_vars)
            context["iter"] = dict(loop_vars)
    return context, args


def _report_base(item: WorkItem, duration_ms: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """A report's payload fields naming its command, and its meta."""
    base: dict[str, Any] = {
        "command_id": item.command_id,
        "run": item.run,
        "index": item.index,
        "attempt": item.attempt,
        "epoch": item.epoch,
    }
    # the fence reads a report's epoch off its meta, whichever transport carries it
    meta: dict[str, Any] = {"duration_ms": round(duration_ms, 3), "epoch": item.epoch}
    if item.traceparent is not None:
        # the attempt's own span, child of the command's traceparent: a report names it
        meta["traceparent"] = tracecontext.attempt_traceparent(
            item.execution_id, item.command_id, item.traceparent
        )
    return base, meta


def retry_note_events(
    item: WorkItem, retry: TaskRetry, event_id: int, now: float, worker_id: str | None = None
) -> list[ev.Event]:
    """The `call.error` a worker reports when a task policy retries a failed task: the
    attempt goes on (same command, same idempotency key), and the reads say what it waits
    on (`core.waiting.POLICY_RETRY`). Fenced like a report: one from a lost claim is stale."""
    base, meta = _report_base(item, 0.0)
    del meta["duration_ms"]  # the attempt goes on: no duration yet
    payload = {
        **base,
        "task": retry.task,
        "error": retry.error,
        "retry": {
            "attempt": retry.attempt,
            "attempts": retry.attempts,
            "not_before": now + retry.delay,
        },
    }
    return [
        ev.new_event(
            event_id,
            item.execution_id,
            ev.CALL_ERROR,
            now,
            step=item.step,
            payload=payload,
            meta=meta,
            worker_id=worker_id,
            parent_event_id=item.command_id,
        )
    ]


def report_events(
    item: WorkItem, outcome: AttemptResult, event_id: int, now: float, worker_id: str | None = None
) -> list[ev.Event]:
    """The events a worker reports for an attempt (one; a batch keeps the door open for more)."""
    base, meta = _report_base(item, outcome.duration_ms)
    if outcome.ok:
        payload = {**base, "result": outcome.result, "ctx": outcome.ctx}
        if outcome.failed_ok:
            payload["failed_ok"] = True
        etype = ev.COMMAND_COMPLETED
    else:
        payload = {**base, "error": outcome.error, "result": outcome.result}
        etype = ev.COMMAND_FAILED
    if outcome.usage:  # beside the result, never in it (DSL 10.6); absent when none
        payload["usage"] = outcome.usage
    # a report is caused by its command (the id of the `command.issued` event)
    return [
        ev.new_event(
            event_id,
            item.execution_id,
            etype,
            now,
            step=item.step,
            payload=payload,
            meta=meta,
            worker_id=worker_id,
            parent_event_id=item.command_id,
        )
    ]
