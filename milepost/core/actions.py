"""An operator acting on runs: retry a step, skip it with a result, restart a run from a
step, re-run it (issue 12). Pure: the state, the playbook, the log, the time and ids come
in; the engine service (`engine.actions`) appends what these return.

The log's rule holds: a run that ended is never moved again. Retry and skip act on a run
that has not ended; restart and re-run start a new execution, linked to the old one by
its `execution.started` (`restarted_from`, `rerun_of`). Every action names its operator
(`actor`) in the event that records it.

Retry and skip stop the step's live attempts first: each gets the `command.failed` the
engine writes when it settles a command (as a cancel does, for one step), so its claim
is gone (the worker's next heartbeat is refused and it stops the attempt) and a report
that comes later is stale.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from milepost.core import cancellation
from milepost.core import compensation_state as cs
from milepost.core import events as ev
from milepost.core import state as st
from milepost.errors import MilepostError
from milepost.playbook import model

RESTARTABLE = frozenset({st.FAILED, st.CANCELLED})

# -- refusals (nothing is appended) ----------------------------------------------------------


class RunEnded(MilepostError):
    """The run has ended: it is never moved again; `restart` starts a new one."""

    code = "execution_terminal"


class StepNotFound(MilepostError):
    """The playbook has no step of that name."""

    code = "step_not_found"


class RunStopping(MilepostError):
    """The run is failing or cancelling: nothing new is issued for it."""

    code = "execution_stopping"


class NothingToRetry(MilepostError):
    """The step has no attempt that failed and waits, or that is live."""

    code = "nothing_to_retry"


class StepNotActive(MilepostError):
    """Only a step that runs or is about to start can be skipped."""

    code = "step_not_active"


class InvalidResult(MilepostError):
    """The result supplied for a skipped step does not fit it."""

    code = "invalid_result"


class NotRestartable(MilepostError):
    """Only a FAILED or CANCELLED run is restarted."""

    code = "not_restartable"


def _fields(state: st.ExecutionState, step: str | None = None) -> dict[str, str]:
    out = {"execution_id": str(state.execution_id)}
    if step is not None:
        out["step"] = step
    return out


def _known_step(state: st.ExecutionState, playbook: model.Playbook, step: str) -> None:
    if step not in playbook.steps:
        raise StepNotFound(
            f"execution {state.execution_id} has no step {step!r} (its "
            f"playbook's steps: {', '.join(playbook.steps)})",
            **_fields(state, step),
        )


def _check_live(state: st.ExecutionState, playbook: model.Playbook, step: str, what: str) -> None:
    xid = state.execution_id
    if state.terminal:
        raise RunEnded(
            f"execution {xid} is {state.status}: an ended run is never moved again; "
            f"`milepost restart {xid} --from {step}` starts a new run from that step",
            status=state.status,
            use="restart",
            **_fields(state, step),
        )
    _known_step(state, playbook, step)
    if state.failure is not None or state.cancel_requested:
        why = "cancelling" if state.cancel_requested else "failing"
        raise RunStopping(
            f"execution {xid} is {why}: nothing new is issued for it, so step "
            f"{step!r} cannot be {what}; restart it once it has ended",
            **_fields(state, step),
        )


def _stopped(
    state: st.ExecutionState,
    sr: st.StepRun,
    kind: str,
    actor: str,
    now: float,
    new_id: Callable[[], int],
    epochs: Mapping[int, int],
) -> list[ev.Event]:
    """A `command.failed` for every live attempt of the step run (`epochs`: of their claims)."""
    error = {"kind": kind, "retryable": False, "message": f"attempt stopped: {kind} by {actor}"}
    return [
        cancellation.failed_event(
            state.execution_id,
            cid,
            sr.step,
            (sr.run, index, cmd.attempt),
            epochs.get(cid, 0),
            error,
            new_id(),
            now,
        )
        for index, cid in sorted(sr.in_flight.items())
        if (cmd := state.commands.get(cid)) is not None
    ]


def _action(
    state: st.ExecutionState,
    event_type: str,
    step: str,
    now: float,
    event_id: int,
    cause: list[ev.Event],
    payload: dict[str, Any],
) -> ev.Event:
    parent = cause[-1].event_id if cause else state.causes.by_step.get(step, state.causes.last)
    return ev.new_event(
        event_id,
        state.execution_id,
        event_type,
        now,
        step=step,
        payload=payload,
        meta={"actor": payload["actor"]},
        parent_event_id=parent,
    )


# -- retry -----------------------------------------------------------------------------------


def retry(
    state: st.ExecutionState,
    playbook: model.Playbook,
    step: str,
    actor: str,
    now: float,
    new_id: Callable[[], int],
    epochs: Mapping[int, int],
    reason: str | None = None,
) -> list[ev.Event]:
    """A new attempt now of every index of the step that waits for a retry timer or has a
    live attempt (lost, waiting for a worker, stuck): those attempts are stopped first.
    The new attempt has a new idempotency key and the same operation key (DSL 10.4)."""
    _check_live(state, playbook, step, "retried")
    sr = state.running.get(step)
    indexes = [] if sr is None else sorted(set(sr.retry_at) | set(sr.in_flight))
    if sr is None or not indexes:
        status = state.step_status.get(step, "not started")
        waiting = " (it waits for an approval)" if sr is not None and sr.gated else ""
        raise NothingToRetry(
            f"step {step!r} of execution {state.execution_id} has no attempt "
            f"to retry: it is {status}{waiting}",
            status=status,
            **_fields(state, step),
        )
    stopped = _stopped(state, sr, "retried", actor, now, new_id, epochs)
    payload = {"actor": actor, "run": sr.run, "indexes": indexes, "reason": reason}
    return [
        *stopped,
        _action(state, ev.STEP_RETRY_REQUESTED, step, now, new_id(), stopped, payload),
    ]


# -- skip ------------------------------------------------------------------------------------


def skip(
    state: st.ExecutionState,
    playbook: model.Playbook,
    step: str,
    result: Any,
    actor: str,
    now: float,
    new_id: Callable[[], int],
    epochs: Mapping[int, int],
    reason: str | None = None,
) -> list[ev.Event]:
    """The step completes with `result` as if it had produced it (its `set` and arcs see
    it): a step that runs (its live attempts stopped, a pending approval closed) or one
    selected and not started yet. A loop step's result is the list of its iterations'."""
    _check_live(state, playbook, step, "skipped")
    sr = state.running.get(step)
    if sr is None and step not in state.pending:
        status = state.step_status.get(step, "not started")
        raise StepNotActive(
            f"step {step!r} of execution {state.execution_id} is {status}: only "
            "a step that runs or is about to start can be skipped",
            status=status,
            **_fields(state, step),
        )
    is_loop = sr.is_loop if sr is not None else playbook.steps[step].loop is not None
    if is_loop and not isinstance(result, list):
        raise InvalidResult(
            f"step {step!r} is a loop: its result is a JSON array of its iterations' results",
            **_fields(state, step),
        )
    run = sr.run if sr is not None else state.run_counts.get(step, 0) + 1
    stopped = [] if sr is None else _stopped(state, sr, "skipped", actor, now, new_id, epochs)
    payload = {"actor": actor, "run": run, "result": ev.jsonable(result), "reason": reason}
    return [*stopped, _action(state, ev.STEP_SKIP_REQUESTED, step, now, new_id(), stopped, payload)]


# -- restart and re-run ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Origin:
    """How a new execution comes from an old one: the fields its `execution.started` adds
    (they may name another entry step) and the step results it reuses (`step.reused`)."""

    started: dict[str, Any]
    reused: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def events(
        self, execution_id: int, started_id: int, now: float, new_id: Callable[[], int]
    ) -> list[ev.Event]:
        """The `step.reused` events that follow the new run's `execution.started`."""
        return [
            ev.new_event(
                new_id(),
                execution_id,
                ev.STEP_REUSED,
                now,
                step=step,
                payload=payload,
                parent_event_id=started_id,
            )
            for step, payload in self.reused
        ]


def rerun(state: st.ExecutionState, actor: str) -> Origin:
    """A new execution of the same playbook version and inputs, from its entry step."""
    return Origin({"rerun_of": str(state.execution_id), "rerun_by": actor})


def restart(
    state: st.ExecutionState,
    log: Sequence[ev.Event],
    playbook: model.Playbook,
    from_step: str | None,
    actor: str,
) -> Origin:
    """The new run of a FAILED or CANCELLED one, from `from_step` (default: the failed
    step, else the first step that did not complete): the results its steps completed
    before that step last started are reused, in log order (each run of a step with its
    ctx writes), except those its compensations undid; the run starts at that step, with
    the args it started with."""
    xid = state.execution_id
    if state.status not in RESTARTABLE:
        raise NotRestartable(
            f"execution {xid} is {state.status}: only a FAILED or CANCELLED "
            "run is restarted (`milepost rerun` starts a new one of any)",
            status=state.status,
            execution_id=str(xid),
        )
    step = from_step or default_step(state, log, playbook)
    _known_step(state, playbook, step)
    enters = [i for i, e in enumerate(log) if e.event_type == ev.STEP_ENTER and e.step == step]
    cut = enters[-1] if enters else len(log)
    args = (log[cut].payload.get("args") or {}) if enters else state.pending.get(step, {})
    # a step run the old run compensated was undone: its result is not reused
    undone = {
        (i.step, i.run)
        for i in (state.compensation.items if state.compensation else ())
        if i.status == cs.COMPLETED
    }
    reused = [
        (str(e.step), _reused(e, xid))
        for e in log[:cut]
        if e.event_type == ev.STEP_EXIT
        and e.status == st.COMPLETED
        and e.step != step
        and (e.step, e.payload.get("run", 1)) not in undone
    ]
    started = {
        "entry_step": step,
        "entry_args": args,
        "restarted_from": str(xid),
        "restart": {"from_step": step, "actor": actor, "reused": sorted({s for s, _ in reused})},
    }
    return Origin(started, reused)


def _reused(exit_event: ev.Event, xid: int) -> dict[str, Any]:
    p = exit_event.payload
    payload = {
        "run": p.get("run", 1),
        "result": p.get("result"),
        "ctx": p.get("ctx") or {},
        "from_execution": str(xid),
        "from_event": str(exit_event.event_id),
    }
    if "loop" in p:
        payload["loop"] = p["loop"]
    return payload


def default_step(
    state: st.ExecutionState, log: Sequence[ev.Event], playbook: model.Playbook
) -> str:
    """The step a restart starts from when none is named."""
    failed = (state.error or {}).get("step")
    if isinstance(failed, str) and failed in playbook.steps:
        return failed
    for event in log:
        if (
            event.event_type == ev.STEP_ENTER
            and event.step is not None
            and state.step_status.get(event.step) != st.COMPLETED
        ):
            return event.step
    return playbook.entry_step
