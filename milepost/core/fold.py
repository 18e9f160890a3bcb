"""The fold: an execution's state (`core.state`) from its events.

`fold(state, events)` applies events in log order, one `_apply_<event>` per type (a
concept's own events through its module: `core.action_state`, `core.compensation_state`,
`core.teardown_state`; the approvals' here, into `core.approval_state`'s records); an
unknown type raises. The state is a plain mutable object owned by whoever folds it (the
orchestrator keeps one per execution and folds only new events into it): copying a large
state on every event would make a 1,000-iteration loop quadratic. Purity is about inputs,
not mutation: fold reads no clock, no store and no randomness, so the same events always
give the same state, in any split of increments.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from milepost.core import action_state as acts
from milepost.core import approval_state as ap
from milepost.core import compensation_state as cs
from milepost.core import events as ev
from milepost.core import final_step_state as fs
from milepost.core import teardown_state as td
from milepost.core.cancellation import mark_cancel
from milepost.core.state import (
    CANCELLED,
    COMPLETED,
    FAILED,
    NO_INDEX,
    RUNNING,
    SKIPPED,
    Command,
    ExecutionState,
    Failure,
    PolicyRetry,
    StepRun,
    completed_run,
)
from milepost.core.usage import Totals
from milepost.playbook import pools


class UnknownEvent(ValueError):
    """fold was given an event type it does not know."""


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
        event = mark_cancel(state, event)
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
        _close_pending_approvals(state, step, sr.run)
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
        _close_pending_approvals(state)
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


# -- approvals (DSL 10.3) ------------------------------------------------------------------------------


def _approval_requested(state: ExecutionState, event: ev.Event) -> None:
    """Only a gated step run still without a request takes one: a request that reached an
    old log some other way (clients could post approval events once) changes nothing."""
    p = event.payload
    step = event.step or ""
    sr = state.running.get(step)
    approval_id, run = _int(p.get("approval_id")), _int(p.get("run"))
    if sr is None or not sr.gated or sr.approval_id is not None or sr.run != run or approval_id < 0:
        return
    approval = ap.Approval(
        approval_id=approval_id,
        step=step,
        run=run,
        requested_at=event.created_at,
        approvers=tuple(p.get("approvers") or ()),
        quorum=int(p.get("quorum", 1)),
        expires_at=_float(p.get("expires_at")),
        expires_in=_float(p.get("expires_in")),
        risk=str(p.get("risk") or "medium"),
        allow_self_approval=bool(p.get("allow_self_approval")),
        started_by=p.get("started_by"),
        digest=str(p.get("digest") or ""),
        calls=list(p.get("calls") or []),
        policy=p.get("policy"),
    )
    state.approvals[approval_id] = approval
    sr.approval_id = approval_id
    state.step_status[step] = ap.AWAITING_APPROVAL


def _approval_decided(state: ExecutionState, event: ev.Event) -> None:
    p = event.payload
    approval = state.approvals.get(_int(p.get("approval_id")))
    if approval is None or approval.status != ap.PENDING:
        return
    voter = ap.Voter(str(p.get("identity") or ""), frozenset(p.get("roles") or ()))
    decision = p.get("decision")
    if (
        decision not in ap.DECISIONS
        or not ap.may_decide(approval, voter)
        or ap.is_self_approval(approval, voter)
        or ap.has_voted(approval, voter.identity)
    ):
        return
    approval.votes.append(ap.Vote(voter.identity, str(decision), p.get("reason"), event.created_at))


def _approval_outcome(status: str) -> Any:
    def apply(state: ExecutionState, event: ev.Event) -> None:
        approval = state.approvals.get(_int(event.payload.get("approval_id")))
        if approval is None or approval.status != ap.PENDING:
            return
        approval.status = status
        if status == ap.GRANTED and (event.step or "") in state.running:
            state.step_status[event.step or ""] = "RUNNING"

    return apply


_approval_close_invalidated = _approval_outcome(ap.INVALIDATED)


def _approval_invalidated(state: ExecutionState, event: ev.Event) -> None:
    """Before the grant it closes a pending approval (decide fails the step in the same
    decision). After it, an attempt of the step run was refused (`core.approvals.recheck`
    before issuing it, or the attempt itself before its tool ran): the approval reads
    invalidated, and that index fails as a failed attempt does, so the step run fails once
    its attempts in flight have finished and nothing more is issued or retried."""
    approval = state.approvals.get(_int(event.payload.get("approval_id")))
    if approval is None or approval.status != ap.GRANTED:
        _approval_close_invalidated(state, event)
        return
    approval.status = ap.INVALIDATED
    p = event.payload
    sr = state.running.get(approval.step)
    if sr is None or sr.run != approval.run or "index" not in p:
        return
    index, attempt = _int(p["index"]), _int(p.get("attempt", 1))
    sr.retry_at.pop(index, None)
    sr.retry_errors.pop(index, None)
    if index not in sr.failures:  # the attempt's own refusal is there already
        error = ap.refused_attempt(
            attempt, str(p.get("cause")), str(p.get("reason")), p.get("changed")
        )
        sr.failures[index] = Failure(attempt=attempt, error=error)


def _close_pending_approvals(
    state: ExecutionState, step: str | None = None, run: int | None = None
) -> None:
    """The step run (or, with no step, the whole run) stopped waiting: its pending
    approvals can no longer be decided."""
    for approval in state.approvals.values():
        if approval.status == ap.PENDING and (
            step is None or (approval.step, approval.run) == (step, run)
        ):
            approval.status = ap.CANCELLED


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


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
    ev.APPROVAL_REQUESTED: _approval_requested,
    ev.APPROVAL_DECIDED: _approval_decided,
    ev.APPROVAL_GRANTED: _approval_outcome(ap.GRANTED),
    ev.APPROVAL_DENIED: _approval_outcome(ap.DENIED),
    ev.APPROVAL_EXPIRED: _approval_outcome(ap.EXPIRED),
    ev.APPROVAL_INVALIDATED: _approval_invalidated,
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
