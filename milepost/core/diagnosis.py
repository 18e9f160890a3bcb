"""Why a run is not moving, or why it ended: the verdict of `milepost doctor` and of
`GET /api/executions/{id}/diagnosis`.

`diagnose` reads the fold (steps, loops, retry timers, approvals, cancel, compensation,
teardown, usage) and what the engine knows beside it (`Facts`: the open commands as the command
table holds them, the pools a live worker serves, the run's driver lease, the time of its
last event) and returns findings, the most likely cause first. Each has a stable `kind`,
the step it concerns, one line for people and the same facts as fields for scripts.

Pure: the time and every store fact come in as arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from milepost.core import approval_state as ap
from milepost.core import cancellation, waiting
from milepost.core import compensation_state as cs
from milepost.core import final_step_state as fs
from milepost.core import state as st
from milepost.core import teardown_state as td
from milepost.core.waiting import Child, Driver, Facts, OpenCommand
from milepost.playbook import durations, model
from milepost.playbook.durations import span

COMPLETED = "completed"
FAILED = "failed"
"""A FAILED run's first error (a CANCELLED run's too, when a step had failed first)."""
CANCELLED = "cancelled"
TEARDOWN_FAILED = "teardown_failed"
"""A teardown step of an ended run failed: recorded, the run's status unchanged."""
FAILING = "failing"
"""A step failed: the run fails (or compensates) once the commands still out finish."""
NO_DRIVER = "no_driver"
"""A run of the embedded mode whose `milepost run` stopped: nothing issues its commands."""
NO_LIVE_WORKER = "no_live_worker"
LEASE_EXPIRED = "lease_expired"
AWAITING_APPROVAL = "awaiting_approval"
CANCEL_PENDING = "cancel_pending"
COMPENSATING = "compensating"
TEARING_DOWN = "tearing_down"
"""The run's outcome is decided: its teardown steps run before it ends."""
RETRY_PENDING = "retry_pending"
JOIN_WAITING = "join_waiting"
LOOP_WAITING = "loop_waiting"
CHILD_RUNNING = "child_running"
"""A `playbook` step waits for the child run it started (`milepost doctor CHILD`)."""
CLAIMED = "claimed"
QUEUED = "queued"
STALL_NEAR = "stall_near"
BUDGET_NEAR = "budget_near"
IDLE = "idle"
"""Nothing blocks it that the engine can see: its next decision is due."""

ORDER = (
    FAILED,
    CANCELLED,
    COMPLETED,
    TEARDOWN_FAILED,
    FAILING,
    NO_DRIVER,
    NO_LIVE_WORKER,
    LEASE_EXPIRED,
    AWAITING_APPROVAL,
    CANCEL_PENDING,
    COMPENSATING,
    TEARING_DOWN,
    RETRY_PENDING,
    JOIN_WAITING,
    LOOP_WAITING,
    CHILD_RUNNING,
    CLAIMED,
    QUEUED,
    STALL_NEAR,
    BUDGET_NEAR,
    IDLE,
)
"""Every kind, the most likely cause of a run not moving first: what stops everything
(no driver, no worker, a dead worker) before what only waits (a person, a timer) and
what is merely under way (a claimed command)."""

NEAR = 0.8
"""A budget or a stall window counts as near once this share of it is used."""
SHOWN_PER_STEP = 5
"""Commands of one step named one by one (a loop's others are in its `loop_waiting`)."""


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    """One of ORDER: stable, for scripts."""
    message: str
    """One line, for people."""
    step: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    """The facts of the message: ids as strings, times (`*_at`) as epoch seconds (the
    engine's report writes them as ISO-8601 UTC)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "step": self.step,
            "message": self.message,
            "fields": self.fields,
        }


def diagnose(state: st.ExecutionState, playbook: model.Playbook, facts: Facts) -> list[Finding]:
    """The findings about one run, the most likely cause first (`ORDER`)."""
    if state.terminal:
        found = _ended(state, playbook)
    else:
        found = _waiting(state, playbook, facts)
        if not found:
            pending = sorted(state.pending)
            found = [
                Finding(
                    IDLE,
                    "nothing blocks it that the engine can see: its next "
                    "decision is due" + (f" (pending: {', '.join(pending)})" if pending else ""),
                    fields={"pending": pending},
                )
            ]
    rank = {kind: i for i, kind in enumerate(ORDER)}
    return sorted(found, key=lambda f: rank[f.kind])  # stable: each kind keeps its order


# -- an ended run ----------------------------------------------------------------------------


def _ended(state: st.ExecutionState, playbook: model.Playbook) -> list[Finding]:
    at = state.ended_at or state.started_at
    took = {"ended_at": at, "duration_s": round(at - state.started_at, 3)}
    if state.status == st.COMPLETED:
        completed = f"the run completed after {span(at - state.started_at)}"
        return [Finding(COMPLETED, completed, fields=took), *_teardown_failed(state)]
    found = _teardown_failed(state)
    if state.status == st.CANCELLED:
        by = f" by {state.cancel_actor}" if state.cancel_actor else ""
        found.append(
            Finding(
                CANCELLED,
                f"the run was cancelled{by}",
                fields={**took, "actor": state.cancel_actor},
            )
        )
    error = state.failure or state.error
    if error and (state.status == st.FAILED or error.get("kind") != "cancelled"):
        found.append(_first_error(error, playbook))
    return found


def _first_error(error: Mapping[str, Any], playbook: model.Playbook) -> Finding:
    """The error that failed the run: its step, task, tool, template or line of code."""
    step = error.get("step")
    task = error.get("task")
    tool = _tool_of(playbook, step, task)
    fields: dict[str, Any] = {"error_kind": error.get("kind"), "task": task, "tool": tool}
    for name in ("index", "code", "where", "template", "line", "code_line"):
        if error.get(name) is not None:
            fields[name] = error[name]
    fields["error"] = dict(error)
    where = f"step '{step}'" if step else "the run"
    where += f" task '{task}'" if task else ""
    where += f" ({tool})" if tool else ""
    message = f"{where} failed: {_what(error, step, task)}"
    if error.get("line") is not None:
        message += f" at line {error['line']}"
        message += f": {error['code_line']}" if error.get("code_line") else ""
    return Finding(FAILED, message, step, fields)


def _what(error: Mapping[str, Any], step: Any, task: Any) -> str:
    """The error's message; a template's without the step its head already names:
    `template error in input 'v': undefined name 'nope' in '{{ nope }}'`."""
    text = str(error.get("message") or error.get("reason") or "failed")
    where = error.get("where")
    if error.get("kind") != "template" or not isinstance(where, str):
        return text
    detail = text.removeprefix(f"{where}: ")
    field = where.removeprefix(f"step '{step}'")
    if task:
        field = field.removeprefix(f" task '{task}'")
    field = field.removeprefix(": ")
    return f"template error in {field}: {detail}" if field else f"template error: {detail}"


def _tool_of(playbook: model.Playbook, step: Any, task: Any) -> str | None:
    spec = playbook.steps.get(str(step)) if step else None
    if spec is None or not spec.tasks:
        return None
    for t in spec.tasks:
        if task and t.name == task:
            return t.kind
    return spec.tasks[0].kind


# -- a run that is not moving ----------------------------------------------------------------


def _waiting(state: st.ExecutionState, playbook: model.Playbook, facts: Facts) -> list[Finding]:
    found = _failing(state) + _driver(state, facts)
    found += _commands(state, facts)
    found += [_approval(a, facts.now) for a in state.approvals.values() if a.status == ap.PENDING]
    found += _cancel(state, playbook, facts.now) + _compensation(state) + _teardown(state)
    found += [
        _retry(w, facts.now)
        for w in waiting.waits(state, playbook, facts)
        if w.kind in (waiting.RETRY, waiting.POLICY_RETRY)
    ]
    for sr in state.running.values():
        if sr.is_loop:
            found.append(_loop(sr))
    found += _joins(state, playbook) + [_child(state, c) for c in facts.children]
    found += _stall(playbook, facts) + _budget(state, playbook)
    return found


def _failing(state: st.ExecutionState) -> list[Finding]:
    if state.failure is None or state.compensation is not None or state.teardown is not None:
        return []  # the run's end is decided: its final steps say what it does now
    out = len(state.commands)
    step = state.failure.get("step")
    what = state.failure.get("reason") or state.failure.get("message") or "a step failed"
    return [
        Finding(
            FAILING,
            f"{what}; the run fails once the {out} command(s) still out finish",
            step,
            {"commands": out, "error": dict(state.failure)},
        )
    ]


def _driver(state: st.ExecutionState, facts: Facts) -> list[Finding]:
    driver = facts.driver
    if driver is None or driver.live(facts.now):
        return []
    why = (
        "its process is gone"
        if driver.alive is False
        else f"its lease ended {span(facts.now - driver.expires_at)} ago"
    )
    return [
        Finding(
            NO_DRIVER,
            f"no process drives this run: the `milepost run` that drove "
            f"it ({driver.holder}) stopped, {why}; continue it with `milepost resume "
            f"{state.execution_id}`",
            fields={
                "holder": driver.holder,
                "lease_expires_at": driver.expires_at,
                "alive": driver.alive,
            },
        )
    ]


def _commands(state: st.ExecutionState, facts: Facts) -> list[Finding]:
    # a run of the embedded mode is run by the in-process workers of its driver, in every
    # pool: its queued commands wait for that driver, never for a worker of their pool
    driver = facts.driver
    found: list[Finding] = []
    unserved: dict[str, list[st.Command]] = {}
    shown: dict[str, int] = {}
    for cid, cmd in sorted(state.commands.items()):
        row = facts.commands.get(cid)
        if row is None:
            continue  # settled since the fold was read: a report is on its way in
        if _policy_retry_waits(cmd, row, facts.now, driver):
            continue  # its worker waits to run a task again: the retry's finding says so
        if (
            row.status == waiting.QUEUED_STATUS
            and driver is None
            and row.pool not in facts.live_pools
        ):
            unserved.setdefault(row.pool, []).append(cmd)
            continue
        shown[cmd.step] = shown.get(cmd.step, 0) + 1
        if shown[cmd.step] <= SHOWN_PER_STEP:
            found.append(_command(cmd, row, facts.now, driver))
    for pool, cmds in sorted(unserved.items()):
        steps = sorted({c.step for c in cmds})
        found.append(
            Finding(
                NO_LIVE_WORKER,
                f"{len(cmds)} command(s) of step "
                f"{', '.join(steps)} wait in pool {pool}, which no live worker "
                f"serves: start `milepost worker --pool {pool}`",
                steps[0],
                {"pool": pool, "commands": len(cmds), "steps": steps},
            )
        )
    return found


def _policy_retry_waits(
    cmd: st.Command, row: OpenCommand, now: float, driver: Driver | None
) -> bool:
    """A claimed command whose worker reported a task policy's retry (`waiting.POLICY_RETRY`)
    and holds it still: a live lease of a live driver's (or a server's) worker."""
    if cmd.retrying is None or row.status == waiting.QUEUED_STATUS:
        return False
    ends = row.lease_expires_at
    return (ends is None or ends > now) and (driver is None or driver.live(now))


def _command(cmd: st.Command, row: OpenCommand, now: float, driver: Driver | None) -> Finding:
    what = f"step '{_where(cmd.step, cmd.index)}' attempt {cmd.attempt}"
    fields: dict[str, Any] = {
        "command_id": str(cmd.command_id),
        "index": cmd.index,
        "attempt": cmd.attempt,
        "pool": row.pool,
        "worker_id": row.worker_id,
    }
    if row.status == waiting.QUEUED_STATUS:
        if driver is None:
            then = f"a live worker of pool {row.pool} should claim it"
        elif driver.live(now):
            then = "the in-process workers of `milepost run` should claim it"
        else:
            then = "it runs once `milepost resume` drives the run again"
        return Finding(QUEUED, f"{what} is queued: {then}", cmd.step, fields)
    ends = row.lease_expires_at
    fields["lease_expires_at"] = ends
    if driver is not None and not driver.live(now):
        return Finding(
            CLAIMED,
            f"{what} was claimed by {row.worker_id} of the `milepost run` "
            "that stopped: `milepost resume` gives it back and runs it again",
            cmd.step,
            fields,
        )
    if ends is not None and ends <= now:
        return Finding(
            LEASE_EXPIRED,
            f"{what}: the lease of {row.worker_id} ended "
            f"{span(now - ends)} ago without a report; the reconciler takes the "
            "command back on its next tick",
            cmd.step,
            fields,
        )
    left = "" if ends is None else f"; its lease ends in {span(ends - now)}"
    return Finding(CLAIMED, f"{what} is claimed by {row.worker_id}{left}", cmd.step, fields)


def _approval(approval: ap.Approval, now: float) -> Finding:
    votes = f"{len(approval.approvals)}/{approval.quorum} approvals"
    who = ", ".join(approval.approvers)
    message = (
        f"step '{approval.step}' waits for approval {approval.approval_id} ({votes}, "
        f"risk {approval.risk}); who may decide: {who}"
    )
    if approval.started_by and not approval.allow_self_approval:
        message += f" (not {approval.started_by}, who started the run)"
    if approval.expires_at is not None and approval.expires_at > now:
        message += f"; it expires in {span(approval.expires_at - now)}"
    elif approval.expires_at is not None:
        message += (
            f"; it expired {span(now - approval.expires_at)} ago: the engine records "
            "that on its next look"
        )
    return Finding(
        AWAITING_APPROVAL,
        message,
        approval.step,
        {
            "approval_id": str(approval.approval_id),
            "approvers": list(approval.approvers),
            "quorum": approval.quorum,
            "approved": len(approval.approvals),
            "votes": [v.identity for v in approval.votes],
            "risk": approval.risk,
            "started_by": approval.started_by,
            "allow_self_approval": approval.allow_self_approval,
            "expires_at": approval.expires_at,
        },
    )


def _cancel(state: st.ExecutionState, playbook: model.Playbook, now: float) -> list[Finding]:
    if not state.cancel_requested:
        return []
    asked = state.cancel_requested_at or now
    ends = asked + playbook.executor.cancel_grace
    by = f" by {state.cancel_actor}" if state.cancel_actor else ""
    out = len(state.commands)
    message = f"cancel requested{by} {span(now - asked)} ago; "
    if not cancellation.cancel_stops_work(state):
        doing = "tearing down" if state.teardown is not None else "compensating"
        message += f"the run finishes {doing} first (a cancel stops neither)"
    else:
        message += f"{out} attempt(s) still out are abandoned as cancelled in {span(ends - now)}"
    return [
        Finding(
            CANCEL_PENDING,
            message,
            fields={
                "actor": state.cancel_actor,
                "requested_at": asked,
                "grace_ends_at": ends,
                "commands": out,
            },
        )
    ]


def _compensation(state: st.ExecutionState) -> list[Finding]:
    comp = state.compensation
    if comp is None or not comp.active:
        return []
    done = sum(1 for i in comp.items if i.status in (cs.COMPLETED, cs.FAILED))
    return [
        Finding(
            COMPENSATING,
            f"the run is compensating before it ends {comp.outcome}: "
            f"{done} of {len(comp.items)} compensation(s) done",
            fields={"outcome": comp.outcome, "done": done, "total": len(comp.items)},
        )
    ]


def _teardown(state: st.ExecutionState) -> list[Finding]:
    """The run tearing down (a teardown step's retry timer is one of `waiting.waits`)."""
    torn = state.teardown
    if torn is None or not torn.active:
        return []
    done = sum(1 for i in torn.items if i.status in fs.DONE)
    return [
        Finding(
            TEARING_DOWN,
            f"the run is tearing down before it ends {torn.status}: "
            f"{done} of {len(torn.items)} teardown step(s) done",
            fields={"outcome": torn.status, "done": done, "total": len(torn.items)},
        )
    ]


def _teardown_failed(state: st.ExecutionState) -> list[Finding]:
    torn = td.summary(state)
    return [
        Finding(
            TEARDOWN_FAILED,
            f"teardown step '{item['step']}' failed: "
            f"{(item['error'] or {}).get('message') or 'failed'} (the run's status stands)",
            item["step"],
            {"error": item["error"]},
        )
        for item in (torn["items"] if torn else ())
        if item["status"] == fs.FAILED
    ]


def _retry(wait: waiting.Wait, now: float) -> Finding:
    """A retry timer waited on (`waiting.RETRY`: the engine's, between attempts;
    `waiting.POLICY_RETRY`: a task policy's, which its worker keeps inside the attempt)."""
    where = _where(wait.step or "", st.NO_INDEX if wait.index is None else wait.index)
    message = f"step '{where}' {waiting.text(wait, now)}"
    if wait.undoes is not None:
        message = f"compensation '{where}' of step '{wait.undoes}' {waiting.text(wait, now)}"
    if wait.kind == waiting.POLICY_RETRY:
        message += (
            f" (a task policy's retry: {wait.worker or 'its worker'} waits inside the "
            "attempt and runs the task again; `milepost logs` shows the failed one)"
        )
    fields: dict[str, Any] = {
        "retry": "policy" if wait.kind == waiting.POLICY_RETRY else "spec.retry",
        "index": wait.index,
        "attempt": wait.attempt,
        "attempts": wait.attempts,
        "not_before_at": wait.due_at,
        "error": wait.error,
        "task": wait.task,
        "worker": wait.worker,
        "count": wait.count,
    }
    if wait.undoes is not None:
        fields["undoes"] = wait.undoes
    return Finding(RETRY_PENDING, message, wait.step, fields)


def _loop(sr: st.StepRun) -> Finding:
    done = len(sr.results)
    in_flight = len(sr.in_flight)
    retrying = len(sr.retry_at)
    waiting = sr.total - done
    not_started = max(sr.total - sr.next_index, 0)
    return Finding(
        LOOP_WAITING,
        f"loop step '{sr.step}' waits for {waiting} of {sr.total} "
        f"iteration(s): {done} done, {in_flight} in flight, {retrying} retrying, "
        f"{not_started} not started (max_in_flight {sr.max_in_flight})",
        sr.step,
        {
            "total": sr.total,
            "done": done,
            "in_flight": in_flight,
            "retrying": retrying,
            "not_started": not_started,
            "max_in_flight": sr.max_in_flight,
            "failed_ok": sr.failed_ok,
        },
    )


def _child(state: st.ExecutionState, child: Child) -> Finding:
    cmd = state.commands.get(child.parent_command_id or -1)
    who = f"step '{_where(cmd.step, cmd.index)}' waits for its" if cmd else "it waits for a"
    return Finding(
        CHILD_RUNNING,
        f"{who} child execution {child.execution_id} "
        f"({child.path}), still running: `milepost doctor {child.execution_id}` says "
        "why",
        cmd.step if cmd else None,
        {"child_execution_id": str(child.execution_id), "path": child.path},
    )


def _joins(state: st.ExecutionState, playbook: model.Playbook) -> list[Finding]:
    found = []
    for step in sorted(state.pending):
        if step not in playbook.joins:
            continue
        busy = (set(state.running) | set(state.pending)) - {step}
        upstream = sorted(busy & playbook.reaches.get(step, frozenset()))
        if upstream:
            found.append(
                Finding(
                    JOIN_WAITING,
                    f"step '{step}' waits at its join for {', '.join(repr(s) for s in upstream)}",
                    step,
                    {"upstream": upstream},
                )
            )
    return found


def _stall(playbook: model.Playbook, facts: Facts) -> list[Finding]:
    stall = playbook.executor.stall_after
    if stall is None or facts.last_progress_at is None:
        return []
    silent = facts.now - facts.last_progress_at
    if silent < NEAR * stall:
        return []
    return [
        Finding(
            STALL_NEAR,
            f"no progress for {span(silent)} of executor.spec.stall_after "
            f"{durations.text(stall)}: the run fails as stalled in "
            f"{span(max(stall - silent, 0.0))} unless something moves it",
            fields={
                "stall_after_s": stall,
                "silent_s": round(silent, 3),
                "last_progress_at": facts.last_progress_at,
            },
        )
    ]


def _budget(state: st.ExecutionState, playbook: model.Playbook) -> list[Finding]:
    budget = playbook.executor.budget
    if budget is None:
        return []
    found = []
    for name, used, limit in (
        ("tokens", state.usage.tokens, budget.tokens),
        ("cost", state.usage.cost, budget.cost),
    ):
        if limit is None or used < NEAR * limit:
            continue
        share = used / limit if limit else 1.0
        found.append(
            Finding(
                BUDGET_NEAR,
                f"{name} {used:g} of executor.spec.budget {limit:g} "
                f"used ({share:.0%}): past it the run fails at the next step "
                "boundary",
                fields={"measure": name, "used": used, "budget": limit},
            )
        )
    return found


# -- words -----------------------------------------------------------------------------------


def _where(step: str, index: int) -> str:
    return step if index == st.NO_INDEX else f"{step}[{index}]"
