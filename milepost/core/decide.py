"""decide: given a state and its playbook, the events that move the run forward.

`decide` never acts; `settle` folds what it returns and asks again until the answer
is empty (the orchestrator's loop, and the unit tests' simulator), and the
orchestrator appends what `settle` produced. Each call does the first phase that has work, in
this order, so every decision sees the consequences of the one before:

1. failures -> retries (`spec.retry`) when the error kind and attempts allow; an attempt
   that refused to run on an approval that no longer covered it -> `approval.invalidated`;
2. step runs whose work is done -> `loop.done` / `step.exit` (step `set`, arcs, arc `set`),
   then `budget.exceeded` when the usage passed `executor.spec.budget` (`core.budget`);
3. cancellation and failure -> once idle, the compensations (`core.compensation`, one at
   a time), then the end (below);
4. pending steps -> `step.enter` + `command.issued` (admission, join barrier, loops);
   a step gated by `spec.approval` enters without commands;
5. approval gates -> `approval.requested`, then on quorum `approval.granted` + the first
   `command.issued` in one decision, or the outcome that fails the step (`core.approvals`);
6. loop iterations and due retries -> `command.issued`; a gated step run's only while its
   approval still covers that attempt (`approvals.recheck`), else `approval.invalidated`;
7. nothing active -> the end.

The end of a run whose outcome is decided: its teardown steps (`core.teardown`, one at a
time) when the playbook names some, then `execution.completed` / `execution.failed` /
`execution.cancelled`. Once tearing down has started, only it moves: every step of the
workflow is over.

Time (`now`) and ids (`new_id`) come in as arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from milepost import ids
from milepost.core import approval_state as ap
from milepost.core import (
    approvals,
    budget,
    cancellation,
    causality,
    compensation,
    liveness,
    teardown,
)
from milepost.core import context as cx
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core.policies import retry_wait, retryable
from milepost.errors import TemplateError
from milepost.playbook import model, pools, render
from milepost.playbook.loop_result import LoopResult


@dataclass(slots=True)
class Decision:
    events: list[ev.Event] = field(default_factory=list)
    wake_at: float | None = None
    """When decide wants to be asked again although no event arrives (a retry's delay)."""


class _Emitter:
    def __init__(
        self,
        state: st.ExecutionState,
        now: float,
        new_id: Callable[[], int],
        playbook: model.Playbook,
    ) -> None:
        self.state = state
        self.now = now
        self.new_id = new_id
        self.playbook = playbook
        self.decision = Decision()
        self.emitted = causality.Emitted()

    def emit(
        self,
        event_type: str,
        step: str | None = None,
        status: str | None = None,
        event_id: int | None = None,
        **payload: Any,
    ) -> None:
        parent = causality.cause(self.state.causes, self.emitted, event_type, step, payload)
        event = ev.new_event(
            event_id or self.new_id(),
            self.state.execution_id,
            event_type,
            self.now,
            step=step,
            status=status,
            payload=payload,
            parent_event_id=parent,
        )
        self.decision.events.append(event)
        self.emitted.add(event)

    def wake(self, at: float) -> None:
        current = self.decision.wake_at
        self.decision.wake_at = at if current is None else min(current, at)

    def issue(self, step: str, run: int, index: int, attempt: int, **extra: Any) -> None:
        """A `command.issued` of `step` (a compensation's too: `extra` marks it), in the
        step's pool and with its lease."""
        key = ids.idempotency_key(
            self.state.execution_id, step, run, None if index == st.NO_INDEX else index, attempt
        )
        # a command is named by the id of the event that issued it, as in NoETL's API
        # (`/api/commands/{event_id}`)
        command_id = self.new_id()
        pool = pools.of_step(self.playbook.steps[step].spec.pool)  # DSL 10.6: which workers run it
        self.emit(
            ev.COMMAND_ISSUED,
            step,
            event_id=command_id,
            command_id=command_id,
            run=run,
            index=index,
            attempt=attempt,
            idempotency_key=key,
            **extra,
            **pools.issued_payload(pool),
            **liveness.lease_fields(self.playbook, step),
        )


@dataclass(slots=True)
class Settled:
    """What `settle` produced: the events of every decision, in order, and the timer."""

    events: list[ev.Event]
    wake_at: float | None
    """When to ask again although no event arrives: the timer of the last decision,
    which saw the whole settled state (a timer an earlier decision set may no longer
    stand, e.g. the run failed meanwhile)."""


def settle(
    state: st.ExecutionState,
    playbook: model.Playbook,
    now: float,
    new_id: Callable[[], int],
    *,
    limit: int,
) -> Settled:
    """Decide until decide has nothing more to say, folding each decision into `state`.

    No I/O: time and ids come in. After `limit` decisions that all produced events the
    run is not settled yet, so the timer is `now` (ask again at once) rather than a
    silent stop."""
    produced: list[ev.Event] = []
    for _ in range(limit):
        decision = decide(state, playbook, now, new_id)
        if not decision.events:
            return Settled(produced, decision.wake_at)
        fl.fold(state, decision.events)
        produced.extend(decision.events)
    return Settled(produced, now)


def decide(
    state: st.ExecutionState, playbook: model.Playbook, now: float, new_id: Callable[[], int]
) -> Decision:
    out = _Emitter(state, now, new_id, playbook)
    if state.terminal:
        return out.decision
    if state.teardown is not None:
        _tear_down(out, playbook)
        return out.decision
    for phase in (
        _resolve_failures,
        _finish_step_runs,
        _end_if_failed_or_cancelled,
        _start_pending,
        _gates,
        _issue_work,
        _complete,
    ):
        phase(out, playbook)
        if out.decision.events:
            break
    return out.decision


# -- 1. failures ------------------------------------------------------------------------


def _retry_spec(playbook: model.Playbook, step: str) -> model.RetrySpec | None:
    return playbook.steps[step].spec.retry


def _retryable(state: st.ExecutionState, spec: model.RetrySpec | None, f: st.Failure) -> bool:
    if _stopping(state):
        return False
    kind = f.error.get("kind")
    return kind != "approval" and retryable(spec, kind, f.attempt)


def _resolve_failures(out: _Emitter, playbook: model.Playbook) -> None:
    for sr in out.state.running.values():
        _invalidate_on_refusal(out, sr)
        spec = _retry_spec(playbook, sr.step)
        if _final_failure(out.state, spec, sr) is not None:
            # the step is failing (DSL 6): siblings in flight may finish, none is retried
            continue
        for index, failure in sorted(sr.failures.items()):
            if not _retryable(out.state, spec, failure):
                continue
            wait = retry_wait(spec, failure.attempt, failure.error)
            out.emit(
                ev.COMMAND_RETRY_SCHEDULED,
                sr.step,
                run=sr.run,
                index=index,
                attempt=failure.attempt + 1,
                not_before=out.now + wait,
                error=failure.error,
            )


def _invalidate_on_refusal(out: _Emitter, sr: st.StepRun) -> None:
    """An attempt refused to run its tool because the approval no longer covered it
    (`approvals.verify`, on the attempt's side): the approval reads invalidated, as when
    decide refuses an attempt before issuing it."""
    approval = out.state.approvals.get(sr.approval_id) if sr.approval_id is not None else None
    if approval is None or approval.status != ap.GRANTED:
        return
    for index, failure in sr.failures.items():
        refusal = failure.error.get("invalidated")
        if failure.error.get("kind") == "approval" and isinstance(refusal, dict):
            out.emit(
                ev.APPROVAL_INVALIDATED,
                sr.step,
                approval_id=approval.approval_id,
                run=sr.run,
                index=index,
                attempt=failure.attempt,
                cause=refusal.get("cause"),
                changed=refusal.get("changed"),
                reason=refusal.get("reason"),
            )
            return


# -- 2. finished step runs ---------------------------------------------------------------


def _final_failure(
    state: st.ExecutionState, spec: model.RetrySpec | None, sr: st.StepRun
) -> tuple[int, st.Failure] | None:
    """The first failure, in the order they arrived, that no retry absorbs: the one whose
    reason fails the step. `failures` keeps arrival order (an index is a new key each time:
    its previous failure left when its retry was scheduled)."""
    for index, failure in sr.failures.items():
        if not _retryable(state, spec, failure):
            return index, failure
    return None


def _run_done(state: st.ExecutionState, sr: st.StepRun) -> bool:
    if sr.in_flight:
        return False
    if _stopping(state):
        return True  # nothing new will be issued: what ran has finished
    if sr.failures:
        # after phase 1 a failure left is final: a sibling's scheduled retry is dropped,
        # else it would wait for a retry that `_issue_work` never issues
        return True
    if sr.retry_at:
        return False
    return len(sr.results) >= sr.total


def _stopping(state: st.ExecutionState) -> bool:
    return state.failure is not None or state.cancel_requested


def _finish_step_runs(out: _Emitter, playbook: model.Playbook) -> None:
    finished = None
    for sr in list(out.state.running.values()):
        if not _run_done(out.state, sr):
            continue
        failed = _final_failure(out.state, _retry_spec(playbook, sr.step), sr)
        if failed is None and _stopping(out.state) and len(sr.results) < sr.total:
            # a loop cut short by a cancel or by a failure elsewhere: it neither
            # completed nor failed, and its arcs are not followed
            reason = "cancelled" if out.state.cancel_requested else budget.cut_short(out.state)
            out.emit(
                ev.STEP_EXIT,
                sr.step,
                st.CANCELLED,
                run=sr.run,
                reason=reason,
                done=len(sr.results),
                total=sr.total,
            )
        elif failed is not None:
            index, failure = failed
            _fail_step(out, sr, failure.error, index if sr.is_loop else None)
        else:
            _complete_step(out, playbook, sr)
            finished = sr.step
    if finished is not None and not _stopping(out.state):  # a step boundary (DSL 10.6)
        error = budget.check(playbook.executor.budget, out.state.usage, finished)
        if error is not None:
            out.emit(ev.BUDGET_EXCEEDED, finished, error=error)


def step_error(step: str, error: dict[str, Any], index: int | None = None) -> dict[str, Any]:
    """The error of a failed step, in the shape a failed run reports (DSL 10)."""
    message = str(error.get("message") or "failed")
    if index is not None:
        message = f"iteration {index}: {message}"
    task = error.get("task")
    where = f"step '{step}'" + (f" task '{task}'" if task else "")
    result = {k: v for k, v in error.items() if k not in ("message", "retry_after")}
    result.update(
        step=step,
        task=task,
        kind=error.get("kind", "error"),
        message=message,
        reason=f"{where} failed: {message}",
    )
    if index is not None:
        result["index"] = index
    return result


def _fail_step(out: _Emitter, sr: st.StepRun, error: dict[str, Any], index: int | None) -> None:
    if cancellation.stopped_by_cancel(out.state, error):
        # stopped by the run's cancel (stopped, abandoned, never claimed, its child
        # cancelled with it): the step did not fail, it was cancelled. The fold takes the
        # status from the event, so older logs (FAILED, kind `cancelled`) still mean what
        # they meant.
        out.emit(
            ev.STEP_EXIT,
            sr.step,
            st.CANCELLED,
            run=sr.run,
            reason="cancelled",
            error=step_error(sr.step, error, index),
        )
        return
    out.emit(ev.STEP_EXIT, sr.step, st.FAILED, run=sr.run, error=step_error(sr.step, error, index))


def _step_result(sr: st.StepRun) -> Any:
    if sr.is_loop:
        return [sr.results[i] for i in range(sr.total)]
    return sr.results.get(st.NO_INDEX)


def _complete_step(out: _Emitter, playbook: model.Playbook, sr: st.StepRun) -> None:
    step = playbook.steps[sr.step]
    result = _step_result(sr)
    view = LoopResult(result, failed=sr.failed_ok) if sr.is_loop else result
    context = cx.base_context(out.state, playbook.reads_of(sr.step).exit)
    context[sr.step] = view
    context["output"] = view
    event_name = ev.LOOP_DONE if sr.is_loop else ev.STEP_EXIT
    try:
        writes = _render_set(step.set, context, f"step '{sr.step}': set")
        context["ctx"] = cx.with_writes(out.state.ctx, writes)
        context["event"] = {"name": event_name, "step": sr.step}
        chosen = _choose_arcs(step.next, context, sr.step)
        targets = []
        for arc in chosen:
            arc_writes = _render_set(
                arc.set, context, f"step '{sr.step}': arc to '{arc.step}': set"
            )
            writes.update(arc_writes)
            context["ctx"] = cx.with_writes(context["ctx"], arc_writes)
            args = render.render_value(
                arc.args, context, where=f"step '{sr.step}': arc to '{arc.step}': args", mode="set"
            )
            targets.append({"step": arc.step, "args": args})
    except TemplateError as exc:
        _fail_step(out, sr, exc.failure(), None)
        return
    if sr.is_loop:
        out.emit(ev.LOOP_DONE, sr.step, run=sr.run, count=len(result))
    payload: dict[str, Any] = {
        "run": sr.run,
        "result": result,
        "ctx": writes,
        "next": targets,
        "compensable": step.spec.compensation is not None,
    }
    if sr.is_loop:
        payload["loop"] = {"failed": sr.failed_ok}
    if step.next.arcs and not chosen:
        payload["dead_end"] = True
    out.emit(ev.STEP_EXIT, sr.step, st.COMPLETED, **payload)


def _render_set(values: dict[str, Any], context: dict[str, Any], where: str) -> dict[str, Any]:
    """Render a step or arc `set`; returns ctx writes (keys without the `ctx.` prefix)."""
    writes: dict[str, Any] = {}
    for key, template in values.items():
        scope, name = cx.split_set_key(key)
        value = render.render_value(template, context, where=f"{where} '{key}'", mode="set")
        if scope == "ctx":
            writes[name] = value
            context["ctx"] = cx.with_writes(context["ctx"], {name: value})
    return writes


def _choose_arcs(nxt: model.Next, context: dict[str, Any], step: str) -> list[model.Arc]:
    chosen = []
    for i, arc in enumerate(nxt.arcs):
        if arc.when is None or render.render_when(
            arc.when, context, where=f"step '{step}': next.arcs[{i}].when"
        ):
            chosen.append(arc)
            if nxt.mode == "exclusive":
                break
    return chosen


# -- 3. failure and cancellation -----------------------------------------------------------


def _end_if_failed_or_cancelled(out: _Emitter, playbook: model.Playbook) -> None:
    state = out.state
    if state.cancel_requested and (state.running or state.commands):  # most runs: no cancel
        grace_ends = cancellation.timer(state, playbook, out.now)
        if grace_ends is not None:  # the engine abandons what still runs then (Lifecycle.wake)
            out.wake(grace_ends)
    if state.compensation is None and (state.running or state.commands or not _stopping(state)):
        return
    # the status was settled when compensating started: a cancel asked meanwhile changes
    # neither the compensations nor how the run ends (DSL 10.5)
    outcome = (
        state.compensation.outcome
        if state.compensation is not None
        else st.CANCELLED
        if state.cancel_requested
        else st.FAILED
    )
    if compensation.proceed(out, playbook, outcome):
        return
    if outcome == st.CANCELLED:
        _end(out, playbook, st.CANCELLED, None)
    elif state.failure is not None:
        _end(out, playbook, st.FAILED, state.failure)


# -- 4. pending steps ------------------------------------------------------------------------


def _blocked(playbook: model.Playbook, join: str, active: set[str]) -> bool:
    if join not in playbook.joins:
        return False
    reach = playbook.reaches.get(join, frozenset())
    return any(a != join and a in reach for a in active)


def _start_pending(out: _Emitter, playbook: model.Playbook) -> None:
    state = out.state
    if state.failure is not None or state.cancel_requested:
        return
    active = set(state.running) | {s for s in state.pending if s not in playbook.joins}
    for name, args in list(state.pending.items()):
        if name in state.running or _blocked(playbook, name, active):
            continue
        _start_step(out, playbook, playbook.steps[name], args)
        active.add(name)


def _admitted(step: model.Step, context: dict[str, Any]) -> bool:
    for i, rule in enumerate(step.spec.admit):
        if rule.when is None or render.render_when(
            rule.when, context, where=f"step '{step.name}': spec.policy.admit.rules[{i}].when"
        ):
            return rule.allow
    return True


def _start_step(
    out: _Emitter, playbook: model.Playbook, step: model.Step, args: dict[str, Any]
) -> None:
    state = out.state
    context = cx.base_context(state, playbook.reads_of(step.name).start)
    if not _admitted(step, context):
        out.emit(ev.STEP_EXIT, step.name, st.SKIPPED, run=state.run_counts.get(step.name, 0))
        return
    run = state.run_counts.get(step.name, 0) + 1
    try:
        gated = step.spec.approval is not None and approvals.required(
            step.spec.approval, context, step.name
        )
        items, limit = _render_loop(step, context) if step.loop is not None else (None, 1)
    except TemplateError as exc:
        out.emit(ev.STEP_ENTER, step.name, run=run, args=args)
        out.emit(
            ev.STEP_EXIT, step.name, st.FAILED, run=run, error=step_error(step.name, exc.failure())
        )
        return
    enter: dict[str, Any] = {"run": run, "args": args}
    if items is not None:
        enter.update(items=items, max_in_flight=limit)
    if gated:
        enter["gated"] = True  # no command before people decide (phase 5)
    out.emit(ev.STEP_ENTER, step.name, **enter)
    if not gated:
        _issue_first(out, step.name, run, items, limit)


def _issue_first(out: _Emitter, step: str, run: int, items: list[Any] | None, limit: int) -> None:
    if items is None:
        out.issue(step, run, st.NO_INDEX, 1)
        return
    for index in range(min(limit, len(items))):
        out.issue(step, run, index, 1)


def _render_loop(step: model.Step, context: dict[str, Any]) -> tuple[list[Any], int]:
    assert step.loop is not None
    where = f"step '{step.name}': loop.in"
    items = render.render_value(step.loop.in_, context, where=where)
    if isinstance(items, tuple):
        items = list(items)
    if not isinstance(items, list):
        kind = "null" if items is None else type(items).__name__
        raise TemplateError(f"loop step '{step.name}': 'in' rendered {kind}, not a list")
    if step.loop.mode == "sequential":
        return list(items), 1
    raw = render.render_value(
        step.loop.max_in_flight, context, where=f"step '{step.name}': loop.spec.max_in_flight"
    )
    try:
        limit = int(raw)
    except (TypeError, ValueError):
        raise TemplateError(
            f"step '{step.name}': loop.spec.max_in_flight rendered {raw!r}, not an integer"
        ) from None
    return list(items), max(1, limit)


# -- 5. approval gates -------------------------------------------------------------------------


def _gates(out: _Emitter, playbook: model.Playbook) -> None:
    state = out.state
    if _stopping(state):
        return  # a gated run stops like any other (phase 2): its approval is cancelled
    for sr in list(state.running.values()):
        if not sr.gated:
            continue
        if sr.approval_id is None:
            approval_id = out.new_id()
            payload = approvals.request(state, playbook, sr, out.now)
            out.emit(
                ev.APPROVAL_REQUESTED,
                sr.step,
                event_id=approval_id,
                approval_id=approval_id,
                **payload,
            )
            continue
        approval = state.approvals[sr.approval_id]
        if approval.status != ap.PENDING:
            continue
        verdict = approvals.resolve(state, playbook, sr, approval, out.now)
        if verdict.event is None:
            if verdict.wake_at is not None:
                out.wake(verdict.wake_at)
            continue
        out.emit(verdict.event, sr.step, **verdict.payload)
        if verdict.error is not None:
            _fail_step(out, sr, verdict.error, None)
        else:  # granted: its commands are issued in the same decision, so exactly once
            _issue_first(out, sr.step, sr.run, sr.items, sr.max_in_flight)


# -- 6. more work for running steps ----------------------------------------------------------


def _issue_work(out: _Emitter, playbook: model.Playbook) -> None:
    state = out.state
    if state.failure is not None or state.cancel_requested:
        return
    for sr in state.running.values():
        if sr.failures:
            continue  # a failed iteration stops new ones; the run ends when in-flight ones finish
        if sr.gated and not _granted(state, sr):
            continue
        error = budget.after_iteration(playbook.executor.budget, state, sr)
        if error is not None:  # the loop issues no more iterations
            out.emit(ev.BUDGET_EXCEEDED, sr.step, error=error)
            return
        _issue_more(out, playbook, sr)


def _issue_more(out: _Emitter, playbook: model.Playbook, sr: st.StepRun) -> None:
    """The due retries of `sr` and, for a loop, its next iterations; a gated run's attempt
    only while its approval still covers it (`_refused`), and nothing after a refusal."""
    for index, at in sorted(sr.retry_at.items()):
        if at > out.now:
            out.wake(at)
            continue
        attempt = sr.attempts.get(index, 1) + 1
        if _refused(out, playbook, sr, index, attempt):
            return
        out.issue(sr.step, sr.run, index, attempt)
    if sr.is_loop:
        busy = len(sr.in_flight) + len(sr.retry_at)
        nxt = sr.next_index
        while busy < sr.max_in_flight and nxt < sr.total:
            if _refused(out, playbook, sr, nxt, 1):
                return
            out.issue(sr.step, sr.run, nxt, 1)
            busy += 1
            nxt += 1


def _refused(
    out: _Emitter, playbook: model.Playbook, sr: st.StepRun, index: int, attempt: int
) -> bool:
    """Whether a gated run's approval no longer covers this attempt (expired, the call
    changed, the policy false now): then `approval.invalidated` says why, the fold fails
    that index (error kind `approval`, never retried) and the attempt is never issued."""
    if not sr.gated or sr.approval_id is None:
        return False
    approval = out.state.approvals[sr.approval_id]
    refusal = approvals.recheck(out.state, playbook, sr, approval, index, attempt, out.now)
    if refusal is None:
        return False
    out.emit(ev.APPROVAL_INVALIDATED, sr.step, **refusal)
    return True


def _granted(state: st.ExecutionState, sr: st.StepRun) -> bool:
    approval = state.approvals.get(sr.approval_id) if sr.approval_id is not None else None
    return approval is not None and approval.status == ap.GRANTED


# -- 7. completion ---------------------------------------------------------------------------


def _complete(out: _Emitter, playbook: model.Playbook) -> None:
    state = out.state
    if state.running or state.pending or state.commands or _stopping(state):
        return  # a stopping run ends in phase 3, after its compensations
    if state.dead_end is not None and playbook.executor.no_next_is_error:
        message = f"step '{state.dead_end}': no arc matched (executor.spec.no_next_is_error)"
        error = {
            "step": state.dead_end,
            "task": None,
            "kind": "dead_end",
            "message": message,
            "reason": message,
        }
        _end(out, playbook, st.FAILED, error)
        return
    _end(out, playbook, st.COMPLETED, None)


# -- the end ---------------------------------------------------------------------------------


def _end(
    out: _Emitter, playbook: model.Playbook, status: str, error: dict[str, Any] | None
) -> None:
    """The run's outcome is decided: its teardown steps first, else its terminal event."""
    if not teardown.begin(out, playbook, status, error):
        _terminal(out, status, error, None)


def _tear_down(out: _Emitter, playbook: model.Playbook) -> None:
    td = out.state.teardown
    assert td is not None
    if not teardown.proceed(out, playbook):
        _terminal(out, td.status, td.error, td.outcomes())


def _terminal(
    out: _Emitter,
    status: str,
    error: dict[str, Any] | None,
    torn: list[dict[str, Any]] | None,
) -> None:
    event_type, payload = teardown.terminal(status, error, torn)
    out.emit(event_type, **payload)
