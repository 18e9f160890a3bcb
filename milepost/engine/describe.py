"""`describe`: one read of a run for an operator, the same on the local database and on a
server (`milepost describe`, `GET /api/executions/{id}/describe`).

The run's summary (`summaries.execution_summary`) with, for each step, what its events
tell: when it started and ended, each attempt (its command, the worker of its
`command.claimed`, start, end, duration, error), the step's input as its call renders now
(redacted, as an approval shows it: `core.approvals.shown_call`) and, for a failed
attempt, what the tool returned with its error (a shell step's stderr, an http step's
response body) instead of a bare `null`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from milepost.core import approvals as core_approvals
from milepost.core import compensation_state as cs
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core import work
from milepost.engine import summaries
from milepost.engine.lifecycle import Lifecycle
from milepost.playbook import model
from milepost.store import port

ATTEMPTS_SHOWN = 50
"""Attempts listed per step (the latest ones); a long loop has thousands: the rest are
counted in `attempts_total`."""
_ENDS = {
    ev.COMMAND_COMPLETED: "COMPLETED",
    ev.COMMAND_FAILED: "FAILED",
    ev.COMMAND_LEASE_EXPIRED: "LOST",
    ev.COMMAND_RELEASED: "RELEASED",
}
_STEP_ENDS = frozenset(
    {
        ev.STEP_EXIT,
        # a final step (a compensation, a teardown step) exits through its own outcome
        ev.COMPENSATION_COMPLETED,
        ev.COMPENSATION_FAILED,
        ev.TEARDOWN_COMPLETED,
        ev.TEARDOWN_FAILED,
    }
)
_REPORTED = frozenset({_ENDS[ev.COMMAND_COMPLETED], _ENDS[ev.COMMAND_FAILED]})


def describe(engine: Lifecycle, execution_id: int) -> dict[str, Any]:
    """The run's summary with `started_at`, `ended_at`, `duration_s` and, per step,
    `started_at`, `ended_at`, `duration_s`, `worker`, `input`, `attempts_total` and
    `attempts` (`[{command_id, run, index, attempt, status, worker, started_at, ended_at,
    duration_s, error, output}]`); times ISO-8601 UTC with milliseconds, durations in
    seconds. ExecutionNotFound when there is no such run."""
    row = engine.execution(execution_id)
    # the log folded here, not the engine's cached state: the workload stays the masked one
    # of `execution.started` (no key needed to describe a sealed run), and the same read
    # makes the timeline
    log = engine.events(row.execution_id)
    state = fl.fold(None, log)
    playbook = engine.playbook(state.path, state.version or 0)
    shown = view(state, playbook, log)
    _running_children(engine, state, playbook, shown)
    shown["waits"] = engine.waits_of(state, playbook)
    return shown


def view(
    state: st.ExecutionState, playbook: model.Playbook, log: Iterable[ev.Event]
) -> dict[str, Any]:
    summary = summaries.execution_summary(state)
    _compensations(state, summary["steps"])
    steps = timeline(log)
    for name, shown in summary["steps"].items():
        seen = steps.get(name, _Step())
        attempts = seen.attempts
        last = attempts[-1] if attempts else None
        if not _starts_children(playbook, name):  # only a `playbook` step's result is a child
            for a in attempts:
                a["child_execution_id"] = None
        shown.update(
            _times(seen.started_at, seen.ended_at),
            worker=last["worker"] if last else None,
            input=step_input(state, playbook, name),
            attempts_total=len(attempts),
            attempts=[
                {**a, **_times(a["started_at"], a["ended_at"], span=False)}
                for a in attempts[-ATTEMPTS_SHOWN:]
            ],
        )
        shown["result"] = _by_reference(state, playbook, name, shown["result"], seen)
        failed = next((a for a in reversed(attempts) if a["status"] == "FAILED"), None)
        if shown["status"] == st.FAILED and failed is not None:
            shown["error"] = failed["error"]
            if shown["result"] is None:
                shown["result"] = failed["output"]  # the tool's reply: stderr, a body
    summary.update(
        path=state.path,
        version=state.version,
        started_by=state.started_by,
        parent_execution_id=_sid(state.parent_execution_id),
        **_times(state.started_at, state.ended_at),
    )
    return summary


def _compensations(state: st.ExecutionState, shown: dict[str, Any]) -> None:
    """The compensation steps that ran (DSL 10.5), each with the step it undid
    (`compensates`): they run outside the workflow's arcs, so the fold's step statuses
    never name them, and describe left them out."""
    comp = state.compensation
    for item in comp.items if comp is not None else ():
        if item.status == cs.PENDING and item.command_id is None and not item.attempt:
            continue  # not started: nothing ran
        entry = shown.setdefault(
            item.target,
            {"status": item.status, "result": item.result, "runs": 0},
        )
        undone = entry.setdefault("compensates", [])
        if item.step not in undone:
            undone.append(item.step)
        if item.target not in state.step_status:  # only a compensation: its item says it
            entry.update(status=item.status, result=item.result, error=item.error)
            entry["runs"] = state.run_counts.get(item.target, entry["runs"])


@dataclass(slots=True)
class _Step:
    """What the log tells of one step: its first start, last end and every attempt."""

    started_at: float | None = None
    ended_at: float | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    by_command: dict[int, dict[str, Any]] = field(default_factory=dict)
    completed: tuple[int, Any] | None = None
    """The last `command.completed`: its event id and its result."""


def timeline(log: Iterable[ev.Event]) -> dict[str, _Step]:
    """Each step's first start, last end and attempts, from its events in log order."""
    steps: dict[str, _Step] = {}
    for event in log:
        if not event.step or event.meta.get("stale"):
            continue  # a fenced-off report is not an attempt's end
        step = steps.setdefault(event.step, _Step())
        kind, p = event.event_type, event.payload
        if kind == ev.STEP_ENTER:
            step.started_at = step.started_at or event.created_at
            step.ended_at = None
        elif kind in _STEP_ENDS:
            step.ended_at = event.created_at
        elif kind == ev.COMMAND_ISSUED and "command_id" in p:
            # a final step (a compensation, a teardown step) enters nothing: it starts with
            # its first command
            step.started_at = step.started_at or event.created_at
            attempt: dict[str, Any] = {
                "command_id": str(p["command_id"]),
                "run": p.get("run"),
                "index": p.get("index"),
                "attempt": p.get("attempt"),
                "status": "QUEUED",
                "worker": None,
                "started_at": None,
                "ended_at": None,
                "duration_s": None,
                "error": None,
                "output": None,
                "idempotency_key": p.get("idempotency_key"),
                "child_execution_id": None,
            }
            step.attempts.append(attempt)
            step.by_command[int(p["command_id"])] = attempt
        elif (known := step.by_command.get(_int(p.get("command_id")))) is not None:
            _settle(known, event)
            if kind == ev.COMMAND_COMPLETED:
                step.completed = (event.event_id, p.get("result"))
    return steps


def _settle(attempt: dict[str, Any], event: ev.Event) -> None:
    """What one more event of a command says of its attempt."""
    kind, p = event.event_type, event.payload
    if kind == ev.COMMAND_CLAIMED:
        attempt.update(
            status="RUNNING", worker=p.get("worker_id"), started_at=event.created_at, ended_at=None
        )
    elif kind in _ENDS:
        if attempt["status"] in _REPORTED:
            # a lease expiry written after the report (a log from before the expiry was
            # checked against the claim): the report is the attempt's end, never LOST
            return
        attempt.update(status=_ENDS[kind], ended_at=event.created_at)
        took = event.meta.get("duration_ms")
        attempt["duration_s"] = (
            round(float(took) / 1000, 3)
            if isinstance(took, int | float)
            else _span(attempt["started_at"], event.created_at)
        )
        if kind == ev.COMMAND_FAILED:
            attempt.update(error=p.get("error"), output=p.get("result"))
        if kind in (ev.COMMAND_COMPLETED, ev.COMMAND_FAILED):
            attempt["child_execution_id"] = _child_of(p.get("result"))


def _by_reference(
    state: st.ExecutionState, playbook: model.Playbook, name: str, result: Any, seen: _Step
) -> Any:
    """A result too large for the log's row is in the result store under its report's event
    id: shown as `{reference: {uri, size}}` (`GET /api/executions/{id}/results/{event_id}`
    reads it, its `result` among the report's payload), not copied into every describe.
    A loop's result is many reports': shown as it is."""
    step = playbook.steps.get(name)
    if result is None or seen.completed is None or step is None or step.loop is not None:
        return result
    size = len(json.dumps(result, default=str))
    event_id, reported = seen.completed
    if size <= port.BLOB_THRESHOLD or reported != result:
        return result
    return {
        "reference": {"uri": f"{port.BLOB_PREFIX}{state.execution_id}/{event_id}", "size": size}
    }


def _child_of(result: Any) -> str | None:
    """The child run a `playbook` step's reply names (`{execution_id, status}`: its default
    shape, and its reply when the child did not complete); None for a shaped result."""
    if isinstance(result, dict) and isinstance(result.get("status"), str):
        xid = result.get("execution_id")
        if isinstance(xid, str | int) and str(xid).isdigit():
            return str(xid)
    return None


def _starts_children(playbook: model.Playbook, name: str) -> bool:
    step = playbook.steps.get(name)
    return step is not None and any(task.kind == "playbook" for task in step.tasks)


def _running_children(
    engine: Lifecycle, state: st.ExecutionState, playbook: model.Playbook, shown: dict[str, Any]
) -> None:
    """The child of each attempt still running, from the children's `execution.started`
    (it names the parent's command): a running attempt has no reply to read it from yet.
    Looked for only while a `playbook` step's attempt runs."""
    running = {
        a["command_id"]: a
        for name, step in shown["steps"].items()
        if _starts_children(playbook, name)
        for a in step["attempts"]
        if a["status"] == "RUNNING"
    }
    if not running:
        return
    for xid in engine.store.running_children(state.execution_id):
        started = engine.store.load(xid, before_seq=2)
        command = started[0].payload.get("parent_command_id") if started else None
        if command is not None and str(command) in running:
            running[str(command)]["child_execution_id"] = str(xid)


def step_input(state: st.ExecutionState, playbook: model.Playbook, name: str) -> Any:
    """The step's input as its call renders against the run's context now, redacted
    (what an approval shows); a loop item not current any more stays its template. None
    for a step the playbook does not have (a run of an older version)."""
    if name not in playbook.steps:
        return None
    context, args = work.attempt_context(
        state, playbook, name, state.running.get(name), st.NO_INDEX
    )
    if state.teardown is not None and name in playbook.executor.teardown:
        context["teardown"] = state.teardown.context()  # what its call renders with
    run = state.run_counts.get(name, 1)
    call = core_approvals.shown_call(
        playbook, name, context, args, run, st.NO_INDEX, state.execution_id
    )
    tasks = call.get("tasks") or []
    if len(tasks) == 1:
        return tasks[0].get("input")
    return {str(t.get("task") or i): t.get("input") for i, t in enumerate(tasks)}


def _times(start: float | None, end: float | None, span: bool = True) -> dict[str, Any]:
    """`started_at`, `ended_at` as the API writes times, and `duration_s` unless told not."""
    shown: dict[str, Any] = {"started_at": summaries.iso(start), "ended_at": summaries.iso(end)}
    if span:
        shown["duration_s"] = _span(start, end)
    return shown


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(end - start, 3)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _sid(value: int | None) -> str | None:
    return None if value is None else str(value)
