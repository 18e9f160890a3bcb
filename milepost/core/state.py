"""The state of one execution, as the fold of its events.

`fold(state, events)` applies events in log order, one `_apply_<event>` per type; an
unknown type raises. The state is a plain mutable object owned by whoever folds it
(the orchestrator keeps one per execution and folds only new events into it): copying
a large state on every event would make a 1,000-iteration loop quadratic. Purity is
about inputs, not mutation: fold reads no clock, no store and no randomness, so the
same events always give the same state, in any split of increments.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from milepost.core import action_state as acts
from milepost.core import approval_state as ap
from milepost.core import compensation_state as cs
from milepost.core import events as ev
from milepost.core import final_step_state as fs
from milepost.core import teardown_state as td
from milepost.core.causality import Causes
from milepost.core.usage import Totals
from milepost.playbook import pools
from milepost.playbook.loop_result import LoopResult

RUNNING = "RUNNING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
CANCELLED = "CANCELLED"
SKIPPED = "SKIPPED"
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED})

NO_INDEX = -1
"""The iteration index used for the single command of a step that has no loop."""


class UnknownEvent(ValueError):
    """fold was given an event type it does not know."""


@dataclass(slots=True)
class Failure:
    """A command failure that decide has not yet turned into a retry or a step failure."""

    attempt: int
    error: dict[str, Any]


@dataclass(slots=True)
class StepRun:
    """One start of a step: its single command, or its loop iterations."""

    step: str
    run: int
    args: dict[str, Any] = field(default_factory=dict)
    items: list[Any] | None = None
    """Loop items (rendered `loop.in`), None when the step has no loop."""
    max_in_flight: int = 1
    next_index: int = 0
    """Next loop index to issue (0 or 1 for a single command)."""
    in_flight: dict[int, int] = field(default_factory=dict)
    """index -> command id of the live command."""
    attempts: dict[int, int] = field(default_factory=dict)
    """index -> attempt number of the latest command issued for it."""
    results: dict[int, Any] = field(default_factory=dict)
    failures: dict[int, Failure] = field(default_factory=dict)
    """index -> failure awaiting a decision (retry or fail)."""
    retry_at: dict[int, float] = field(default_factory=dict)
    """index -> time after which the next attempt may be issued."""
    retry_errors: dict[int, dict[str, Any]] = field(default_factory=dict)
    """index -> the error of the attempt that timer retries (`milepost doctor` names it)."""
    failed_ok: int = 0
    """Loop iterations whose error a policy let through (loop `.stats.failed`)."""
    error: dict[str, Any] | None = None
    """The error that fails this run (set by decide through step.exit, kept here for reads)."""
    gated: bool = False
    """`spec.approval` required a decision before this run issues anything (DSL 10.3)."""
    approval_id: int | None = None
    """Its approval request, once made."""

    @property
    def is_loop(self) -> bool:
        return self.items is not None

    @property
    def total(self) -> int:
        return len(self.items) if self.items is not None else 1


@dataclass(frozen=True, slots=True)
class PolicyRetry:
    """A task of a live attempt failed and its policy retries it (DSL 5): the worker waits
    inside the attempt, which goes on holding its command (`call.error` with `retry`)."""

    task: str | None
    """The task retried (None: the step's only tool)."""
    attempt: int
    """The task's execution the wait leads to (2 after the first failed)."""
    attempts: int
    """The policy's `attempts`: executions including the first."""
    not_before: float
    """When the worker runs the task again."""
    error: dict[str, Any]
    """The error of the execution that failed."""


@dataclass(slots=True)
class Command:
    """A live command: issued, not yet completed or failed."""

    command_id: int
    step: str
    run: int
    index: int
    attempt: int
    idempotency_key: str
    pool: str = pools.DEFAULT
    """The workers it goes to (DSL 10.6): where its wake-up is published."""
    retrying: PolicyRetry | None = None
    """Its attempt's latest task policy retry, as its worker reported it."""


@dataclass(slots=True)
class ExecutionState:
    execution_id: int
    status: str = RUNNING
    path: str = ""
    version: int | None = None
    workload: dict[str, Any] = field(default_factory=dict)
    """As `execution.started` shows it (masked) until the orchestrator opens the sealed one."""
    sealed_workload: str | None = None
    """The result-store entry holding the real workload (`engine.seal`), if it was masked."""
    workload_secrets: tuple[str, ...] | None = None
    """Set when the orchestrator opened the sealed workload: its sensitive values, which it
    redacts from every event it appends. None: not opened (the workload is the masked one)."""
    parent_execution_id: int | None = None
    parent_command_id: int | None = None
    """The command of the parent that started this run (a `playbook` tool call)."""
    traceparent: str | None = None
    """A child run's trace context: its parent's trace (`core.tracecontext`); None: its own."""
    started_at: float = 0.0
    ended_at: float | None = None
    ctx: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    """step -> latest result."""
    step_status: dict[str, str] = field(default_factory=dict)
    run_counts: dict[str, int] = field(default_factory=dict)
    running: dict[str, StepRun] = field(default_factory=dict)
    entry_step: str = ""
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Steps selected by arcs and not yet started -> the merged extra args of the selections."""
    commands: dict[int, Command] = field(default_factory=dict)
    completed_runs: list[tuple[str, int]] = field(default_factory=list)
    run_results: dict[tuple[str, int], Any] = field(default_factory=dict)
    """(step, run) -> the result of that completed run of a step naming a compensation: a
    compensation reads the run it undoes (DSL 10.5), which `results` (the latest per
    step) may no longer hold."""
    compensation: cs.Compensation | None = None
    """Set once the run started compensating (`core.compensation_state`)."""
    teardown: td.Teardown | None = None
    """Set once the run started tearing down (`core.teardown_state`)."""
    failure: dict[str, Any] | None = None
    """The first step failure: the run fails once nothing is running."""
    dead_end: str | None = None
    cancel_requested: bool = False
    cancel_requested_at: float | None = None
    """When the first cancel request was logged: `executor.spec.cancel_grace` runs from it."""
    cancel_actor: str | None = None
    """Who asked for that cancel (`user:alice`, `token:ci`), when the request says."""
    started_by: str | None = None
    """The identity that started the run (`user:alice`): it may not approve its own steps."""
    restarted_from: int | None = None
    """The FAILED or CANCELLED run this one restarts (`core.actions.restart`)."""
    approvals: dict[int, ap.Approval] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    """The terminal error of a FAILED execution: {step, task, kind, message, reason}."""
    usage: Totals = field(default_factory=Totals)
    """What the tools reported using (DSL 10.6), summed over every settled report."""
    step_usage: dict[str, Totals] = field(default_factory=dict)
    """The same per step, every run of it."""
    seen: set[int] = field(default_factory=set)
    causes: Causes = field(default_factory=Causes)
    """What decide names as the parent of each event it decides (`core.causality`)."""
    last_seq: int = 0
    event_count: int = 0

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def fold(state: ExecutionState | None, events: Iterable[ev.Event]) -> ExecutionState:
    """Apply events in order; a duplicate event id changes nothing."""
    for event in events:
        if state is None:
            state = ExecutionState(execution_id=event.execution_id)
        state.last_seq = max(state.last_seq, event.seq)
        if event.event_id in state.seen:
            continue
        if event.meta.get("stale") or ev.informative(event):
            # a report fenced off by its epoch, an informative event: in the log, not the run
            state.seen.add(event.event_id)
            continue
        handler = _HANDLERS.get(event.event_type)
        if handler is None:
            raise UnknownEvent(f"unknown event type {event.event_type!r} (event {event.event_id})")
        state.causes.note(event, state.commands)
        handler(state, event)
        state.seen.add(event.event_id)
        state.event_count += 1
    if state is None:
        raise ValueError("fold needs a state or at least one event")
    return state


SETTLED = "the command was already settled (reported, lost or cancelled)"
_SETTLING = ev.SETTLING_REPORTS | {ev.COMMAND_LEASE_EXPIRED}
"""What ends a live command: one that comes after its end changes nothing and is marked
stale (a lease expiry read before an outage and written after the report: never LOST)."""


def fold_reports(
    state: ExecutionState, events: Iterable[ev.Event], repeats: list[ev.Event] | None = None
) -> list[ev.Event]:
    """Fold incoming events and return those to store: not the ones the state has already
    seen (a retried report: the log holds it; they go to `repeats` when given, for the
    store to tell a repeat of the same event from another event with that id), and a
    report for a command this run no longer waits for (a second report, or one after a
    lost lease or a cancel settled it) marked stale, and so is a lease expiry of a command
    already settled. The fold would ignore them anyway; the mark keeps the projections and
    the people reading the log (`describe`) from taking them for the command's outcome."""
    out: list[ev.Event] = []
    for event in events:
        if event.event_id in state.seen:
            if repeats is not None:
                repeats.append(event)
            continue
        if (
            event.event_type in _SETTLING
            and not event.meta.get("stale")
            and _command_id(event) not in state.commands
        ):
            event = replace(event, meta={**event.meta, "stale": True, "stale_reason": SETTLED})
        event = fs.mark_cancel(state, event)
        fold(state, [event])
        out.append(event)
    return out


def _command_id(event: ev.Event) -> int | None:
    value = event.payload.get("command_id")
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def clone(state: ExecutionState) -> ExecutionState:
    """A deep copy, for callers that must keep the state they folded from."""
    return copy.deepcopy(state)


def _apply_execution_started(state: ExecutionState, event: ev.Event) -> None:
    p = event.payload
    state.status = RUNNING
    state.path = p.get("path", "")
    state.version = p.get("version")
    state.workload = p.get("workload", {})
    state.sealed_workload = p.get("sealed_workload")
    state.parent_execution_id = p.get("parent_execution_id")
    state.parent_command_id = p.get("parent_command_id")
    state.traceparent = p.get("traceparent")
    state.started_at = event.created_at
    state.ctx = dict(p.get("ctx", {}))
    state.entry_step = p.get("entry_step", "")
    state.started_by = p.get("started_by")
    state.restarted_from = int(p["restarted_from"]) if p.get("restarted_from") else None
    if state.entry_step:  # a restart's entry step starts with the args it had
        state.pending[state.entry_step] = dict(p.get("entry_args") or {})


def _apply_step_enter(state: ExecutionState, event: ev.Event) -> None:
    step = event.step or ""
    p = event.payload
    run = int(p["run"])
    state.run_counts[step] = max(state.run_counts.get(step, 0), run)
    state.pending.pop(step, None)
    state.step_status[step] = RUNNING
    state.running[step] = StepRun(
        step=step,
        run=run,
        args=p.get("args", {}),
        items=p.get("items"),
        max_in_flight=int(p.get("max_in_flight", 1)),
        gated=bool(p.get("gated")),
    )


def _apply_command_issued(state: ExecutionState, event: ev.Event) -> None:
    p = event.payload
    step = event.step or ""
    index = int(p.get("index", NO_INDEX))
    cmd = Command(
        command_id=int(p["command_id"]),
        step=step,
        run=int(p["run"]),
        index=index,
        attempt=int(p.get("attempt", 1)),
        idempotency_key=p.get("idempotency_key", ""),
        pool=str(p.get("pool") or pools.DEFAULT),
    )
    state.commands[cmd.command_id] = cmd
    if "compensation" in p:  # a compensation's command: it belongs to no step run
        cs.apply_issued(state, cmd, p["compensation"])
        return
    if "teardown" in p:  # a teardown step's: neither
        td.apply_issued(state, cmd, p["teardown"])
        return
    sr = state.running.get(step)
    if sr is None or sr.run != cmd.run:
        return
    sr.in_flight[index] = cmd.command_id
    sr.attempts[index] = cmd.attempt
    sr.retry_at.pop(index, None)
    sr.retry_errors.pop(index, None)
    if cmd.attempt == 1:
        sr.next_index = max(sr.next_index, (0 if index == NO_INDEX else index) + 1)


def _live_run(
    state: ExecutionState, command_id: int, event: ev.Event
) -> tuple[Command, StepRun] | None:
    cmd = state.commands.pop(command_id, None)
    if cmd is None:
        return None  # unknown or already settled: a late or repeated report changes nothing
    if (item := cs.owns(state, cmd) or td.owns(state, cmd)) is not None:
        item.report(event)
        return None
    sr = state.running.get(cmd.step)
    if sr is None or sr.run != cmd.run:
        return None
    sr.in_flight.pop(cmd.index, None)
    return cmd, sr


def _apply_command_completed(state: ExecutionState, event: ev.Event) -> None:
    p = event.payload
    _add_usage(state, event)
    live = _live_run(state, int(p["command_id"]), event)
    if live is None:
        return
    cmd, sr = live
    sr.results[cmd.index] = p.get("result")
    if p.get("failed_ok"):
        sr.failed_ok += 1
    _write_ctx(state.ctx, p.get("ctx") or {})


def _add_usage(state: ExecutionState, event: ev.Event) -> None:
    """Before the live check: the store's projection sums every report not marked stale."""
    reported = event.payload.get("usage")
    if reported:
        state.usage.add(reported)
        state.step_usage.setdefault(event.step or "", Totals()).add(reported)


def _apply_command_failed(state: ExecutionState, event: ev.Event) -> None:
    p = event.payload
    _add_usage(state, event)
    live = _live_run(state, int(p["command_id"]), event)
    if live is None:
        return
    cmd, sr = live
    sr.failures[cmd.index] = Failure(attempt=cmd.attempt, error=p.get("error") or {})


def _apply_command_lease_expired(state: ExecutionState, event: ev.Event) -> None:
    """The claim lapsed without a report: the attempt is lost (a late report changes nothing)."""
    p = event.payload
    live = _live_run(state, int(p["command_id"]), event)
    if live is None:
        return
    cmd, sr = live
    sr.failures[cmd.index] = Failure(attempt=cmd.attempt, error=fs.lost_error(p))


def _apply_command_retry_scheduled(state: ExecutionState, event: ev.Event) -> None:
    p = event.payload
    if "compensation" in p:
        cs.apply_retry_scheduled(state, event)
        return
    if "teardown" in p:
        td.apply_retry_scheduled(state, event)
        return
    sr = state.running.get(event.step or "")
    if sr is None or sr.run != int(p["run"]):
        return
    index = int(p.get("index", NO_INDEX))
    sr.failures.pop(index, None)
    sr.retry_at[index] = float(p["not_before"])
    sr.retry_errors[index] = p.get("error") or {}


def _apply_call_error(state: ExecutionState, event: ev.Event) -> None:
    """A task of a live attempt failed (`call.error`). One whose policy retries it names the
    retry (`retry: {attempt, attempts, not_before}`): the command waits on the worker's
    timer, not on its tool. It changes no decision; the reads say what the attempt waits on."""
    p = event.payload
    retry, error = p.get("retry"), p.get("error")
    cmd = state.commands.get(_command_id(event) or -1)
    if cmd is None or not isinstance(retry, dict):
        return
    try:
        cmd.retrying = PolicyRetry(
            task=None if p.get("task") is None else str(p["task"]),
            attempt=int(retry["attempt"]),
            attempts=int(retry["attempts"]),
            not_before=float(retry["not_before"]),
            error=error if isinstance(error, dict) else {},
        )
    except (KeyError, TypeError, ValueError):  # a NoETL worker's call.error: no retry it knows
        return


def _apply_loop_done(state: ExecutionState, event: ev.Event) -> None:
    """Informative: the loop's result is recorded by the step.exit that follows."""


def _apply_step_exit(state: ExecutionState, event: ev.Event) -> None:
    step = event.step or ""
    p = event.payload
    status = event.status or COMPLETED
    sr = state.running.pop(step, None)
    state.step_status[step] = status
    if sr is not None and sr.approval_id is not None:
        ap.close_pending(state, step, sr.run)
    if status == SKIPPED:
        state.pending.pop(step, None)
    if status == COMPLETED:
        completed_run(state, step, int(p.get("run", sr.run if sr else 0)), p)
    elif status == FAILED:
        if sr is not None:
            sr.error = p.get("error")
        if state.failure is None:
            state.failure = p.get("error") or {"step": step, "message": "step failed"}
    _write_ctx(state.ctx, p.get("ctx") or {})
    for target in p.get("next", []):
        merged = state.pending.setdefault(target["step"], {})
        merged.update(target.get("args") or {})
    if p.get("dead_end"):
        state.dead_end = step


def completed_run(state: ExecutionState, step: str, run: int, p: dict[str, Any]) -> None:
    """Record run `run` of `step` completed with the result of `p` (a `step.exit`'s payload,
    or a `step.reused`'s: the same fields)."""
    result = p.get("result")
    if "loop" in p:
        result = LoopResult(result or [], failed=int(p["loop"].get("failed", 0)))
    state.results[step] = result
    state.completed_runs.append((step, run))
    # only a compensation reads a run's result after its step ran again (DSL 10.5): a
    # long run without compensations keeps none. An older log's exit does not say
    # (no `compensable`): kept, as it always was.
    if p.get("compensable", True):
        state.run_results[(step, run)] = result


def _apply_run_failure(kind: str) -> Callable[[ExecutionState, ev.Event], None]:
    """Past `executor.spec.budget` (`budget.exceeded`) or silent past `stall_after`
    (`execution.stalled`): the run stops as a failed step stops it (compensations first)."""

    def apply(state: ExecutionState, event: ev.Event) -> None:
        if state.failure is None:
            state.failure = event.payload.get("error") or {"kind": kind, "message": kind}

    return apply


def _apply_execution_cancel_requested(state: ExecutionState, event: ev.Event) -> None:
    if not state.cancel_requested:  # the grace runs from the first request, not a repeat
        state.cancel_requested_at = event.created_at
        actor = event.payload.get("actor")
        state.cancel_actor = actor if isinstance(actor, str) else None
    state.cancel_requested = True


def _apply_terminal(status: str) -> Any:
    def apply(state: ExecutionState, event: ev.Event) -> None:
        state.status = status
        state.ended_at = event.created_at
        state.pending.clear()
        ap.close_pending(state)
        # as in the store's projection: a command still live will never run now, so a late
        # report of it is stale (an engine error ends a run with commands out)
        state.commands.clear()
        td.apply_ended(state, event)
        if status == FAILED:
            state.error = event.payload.get("error") or {"message": "execution failed"}

    return apply


def _apply_informative(state: ExecutionState, event: ev.Event) -> None:
    """Events recorded for people and metrics that do not change the fold."""


def _write_ctx(ctx: dict[str, Any], writes: dict[str, Any]) -> None:
    """Apply `ctx.a.b` style writes (keys given without the `ctx.` prefix, dotted)."""
    for key, value in writes.items():
        parts = key.split(".")
        target = ctx
        for part in parts[:-1]:
            nxt = target.get(part)
            if not isinstance(nxt, dict):
                nxt = {}
                target[part] = nxt
            target = nxt
        target[parts[-1]] = value


_HANDLERS: dict[str, Any] = {
    ev.EXECUTION_STARTED: _apply_execution_started,
    ev.STEP_ENTER: _apply_step_enter,
    ev.COMMAND_ISSUED: _apply_command_issued,
    ev.COMMAND_COMPLETED: _apply_command_completed,
    ev.COMMAND_FAILED: _apply_command_failed,
    ev.COMMAND_RETRY_SCHEDULED: _apply_command_retry_scheduled,
    ev.LOOP_DONE: _apply_loop_done,
    ev.STEP_EXIT: _apply_step_exit,
    ev.EXECUTION_CANCEL_REQUESTED: _apply_execution_cancel_requested,
    ev.EXECUTION_COMPLETED: _apply_terminal(COMPLETED),
    ev.EXECUTION_FAILED: _apply_terminal(FAILED),
    ev.EXECUTION_CANCELLED: _apply_terminal(CANCELLED),
    ev.COMMAND_CLAIMED: _apply_informative,
    ev.COMMAND_RELEASED: _apply_informative,
    ev.COMMAND_STARTED: _apply_informative,
    ev.COMMAND_HEARTBEAT: _apply_informative,
    ev.CALL_DONE: _apply_informative,
    ev.CALL_ERROR: _apply_call_error,
    ev.COMMAND_LEASE_EXPIRED: _apply_command_lease_expired,
    ev.APPROVAL_REQUESTED: ap.apply_requested,
    ev.APPROVAL_DECIDED: ap.apply_decided,
    ev.APPROVAL_GRANTED: ap.apply_outcome(ap.GRANTED),
    ev.APPROVAL_DENIED: ap.apply_outcome(ap.DENIED),
    ev.APPROVAL_EXPIRED: ap.apply_outcome(ap.EXPIRED),
    ev.APPROVAL_INVALIDATED: ap.apply_invalidated,
    ev.COMPENSATION_STARTED: cs.apply_started,
    ev.COMPENSATION_COMPLETED: cs.apply_completed,
    ev.COMPENSATION_FAILED: cs.apply_failed,
    ev.TEARDOWN_STARTED: td.apply_started,
    ev.TEARDOWN_COMPLETED: td.apply_completed,
    ev.TEARDOWN_FAILED: td.apply_failed,
    ev.BUDGET_EXCEEDED: _apply_run_failure("budget"),
    ev.EXECUTION_STALLED: _apply_run_failure("stalled"),
    ev.STEP_RETRY_REQUESTED: acts.apply_retry_requested,
    ev.STEP_SKIP_REQUESTED: acts.apply_skip_requested,
    ev.STEP_REUSED: acts.apply_reused,
}
