"""What a run waits on now: the one answer every operator view gives (`milepost status`,
`doctor`, `describe`, the runs list, the run page and its graph), so none can disagree.

A run not ended waits on something: a retry timer (`spec.retry`'s, kept by the engine
between attempts, or a task policy's, kept by the worker inside an attempt, DSL 5 and
10.1), an approval, a queued command (with or without a live worker of its pool), a
claimed command, a cancel's grace. `waits` names each, grouped per step and kind (a loop's
thousand queued iterations are one wait with its count), the most blocking first.

The data carries absolute due times (`due_at`, epoch seconds); the reader renders them
relative to its own now (`text`): a reply read a minute later still says the truth.

Pure: the fold, the playbook and what the store knows beside it (`Facts`) come in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from milepost.core import approval_state as ap
from milepost.core import cancellation, policies
from milepost.core import final_step_state as fs
from milepost.core import state as st
from milepost.playbook import model
from milepost.playbook.durations import span

NO_WORKER = "no_worker"
"""Queued in a pool no live worker serves: nothing will run it until one starts."""
APPROVAL = "approval"
CANCEL_GRACE = "cancel_grace"
"""A cancel was asked: the attempts still out are abandoned when its grace ends."""
RETRY = "retry"
"""`spec.retry` (or a compensation's retry, or a lost attempt's): the engine's timer issues
the next attempt at `due_at`."""
POLICY_RETRY = "policy_retry"
"""A task policy's retry (DSL 5): the worker waits inside the attempt, holding its command,
and runs the task again at `due_at`."""
QUEUED = "queued"
CLAIMED = "claimed"

ORDER = (NO_WORKER, APPROVAL, CANCEL_GRACE, RETRY, POLICY_RETRY, QUEUED, CLAIMED)
"""Every kind, what blocks the run the longest first: the first is the run's headline."""

QUEUED_STATUS = "queued"
CLAIMED_STATUS = "claimed"
"""The command table's statuses (`store.port.COMMAND_*`: core imports no store)."""


@dataclass(frozen=True, slots=True)
class OpenCommand:
    """A command as the command table holds it (queued or claimed)."""

    command_id: int
    status: str
    worker_id: str | None = None
    lease_expires_at: float | None = None
    pool: str = "default"


@dataclass(frozen=True, slots=True)
class Driver:
    """The driver lease of a run of the embedded mode (`engine.drivers`)."""

    holder: str
    expires_at: float
    alive: bool | None = None
    """Whether the holder's process still exists (None: another host, unknown)."""

    def live(self, now: float) -> bool:
        return self.alive is not False and self.expires_at > now


@dataclass(frozen=True, slots=True)
class Child:
    """A running child execution, started by a `playbook` tool's command."""

    execution_id: int
    path: str
    parent_command_id: int | None = None


@dataclass(frozen=True, slots=True)
class Facts:
    """What the engine knows beside the fold."""

    now: float
    commands: Mapping[int, OpenCommand] = field(default_factory=dict)
    live_pools: frozenset[str] = frozenset()
    """The pools a live worker serves (machine-id leases)."""
    driver: Driver | None = None
    """None: no embedded process ever drove the run (a server does)."""
    last_progress_at: float | None = None
    """When the run last moved (`core.liveness.last_progress`): None without a stall window."""
    children: tuple[Child, ...] = ()


@dataclass(frozen=True, slots=True)
class Wait:
    """One thing a run waits on (the first of its step and kind, with their `count`)."""

    kind: str
    step: str | None = None
    index: int | None = None
    """The loop index; None for a step without a loop (and for run-wide waits)."""
    due_at: float | None = None
    """When it ends: the retry's due time, the approval's expiry, the lease's end, the
    cancel's grace (epoch seconds; None: no end the engine knows)."""
    attempt: int | None = None
    """The attempt the wait leads to (a policy retry's: the task's execution)."""
    attempts: int | None = None
    """Of how many at most."""
    error: dict[str, Any] | None = None
    """The error it retries after."""
    task: str | None = None
    """A policy retry's task, when the step is a pipeline."""
    worker: str | None = None
    pool: str | None = None
    approval_id: str | None = None
    command_id: str | None = None
    undoes: str | None = None
    """A compensation's retry: the step whose run it undoes (DSL 10.5); None for a teardown
    step's."""
    count: int = 1
    """Waits of this step and kind (a loop's iterations): this one is the first due."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "step": self.step,
            "index": self.index,
            "due_at": self.due_at,
            "attempt": self.attempt,
            "attempts": self.attempts,
            "error": self.error,
            "task": self.task,
            "worker": self.worker,
            "pool": self.pool,
            "approval_id": self.approval_id,
            "command_id": self.command_id,
            "undoes": self.undoes,
            "count": self.count,
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Wait:
        """A wait as `as_dict` wrote it (`due_at` in epoch seconds: a reader of the API's
        ISO-8601 converts it first)."""
        due = value.get("due_at")
        return cls(
            kind=str(value["kind"]),
            step=value.get("step"),
            index=value.get("index"),
            due_at=None if due is None else float(due),
            attempt=value.get("attempt"),
            attempts=value.get("attempts"),
            error=value.get("error"),
            task=value.get("task"),
            worker=value.get("worker"),
            pool=value.get("pool"),
            approval_id=value.get("approval_id"),
            command_id=value.get("command_id"),
            undoes=value.get("undoes"),
            count=int(value.get("count") or 1),
        )


def waits(state: st.ExecutionState, playbook: model.Playbook, facts: Facts) -> list[Wait]:
    """What the run waits on, one `Wait` per step and kind, the most blocking first
    (`ORDER`); empty for an ended run."""
    if state.terminal:
        return []
    found = _cancel(state, playbook) + _approvals(state)
    for sr in state.running.values():
        found += _retries(sr, playbook)
    found += _final_step_retries(state, playbook)
    found += _commands(state, facts)
    return _grouped(found)


def first_of(found: list[Wait], step: str) -> Wait | None:
    """The wait a step's box shows: its most blocking."""
    return next((w for w in found if w.step == step), None)


def text(wait: Wait, now: float) -> str:
    """The wait in one line, its times relative to `now`:
    `retrying in 9m 12s, attempt 2 of 3, after: ValueError: boom`."""
    if wait.kind in (RETRY, POLICY_RETRY):
        line = "retrying " + (_in(wait.due_at, now) if wait.due_at is not None else "soon")
        if wait.task:
            line = f"task '{wait.task}' {line}"
        if wait.attempt is not None:
            line += f", attempt {wait.attempt}" + (
                f" of {wait.attempts}" if wait.attempts is not None else ""
            )
        message = (wait.error or {}).get("message")
        line += f", after: {message}" if message else ""
    elif wait.kind == APPROVAL:
        line = "waiting for approval" + (f" {wait.approval_id}" if wait.approval_id else "")
        if wait.due_at is not None:
            line += (
                f", which expires in {span(wait.due_at - now)}"
                if wait.due_at > now
                else ", which has expired"
            )
    elif wait.kind == CANCEL_GRACE:
        line = "cancel requested: the attempts still out are abandoned " + (
            _in(wait.due_at, now) if wait.due_at is not None else "once they stop"
        )
    elif wait.kind == NO_WORKER:
        line = f"queued in pool {wait.pool or 'default'}, which no live worker serves"
    elif wait.kind == QUEUED:
        line = f"queued for a worker of pool {wait.pool or 'default'}"
    else:
        line = f"running on {wait.worker}" if wait.worker else "running"
        if wait.attempt is not None:
            line += f", attempt {wait.attempt}"
    return line + (f" (and {wait.count - 1} more)" if wait.count > 1 else "")


def _in(at: float | None, now: float) -> str:
    if at is None or at <= now:
        return "now"
    return f"in {span(at - now)}"


def _index(index: int) -> int | None:
    return None if index == st.NO_INDEX else index


def max_attempts(
    playbook: model.Playbook, step: str, error: Mapping[str, Any] | None
) -> int | None:
    """How many attempts `spec.retry` gives the step; a lost attempt's when it has none."""
    spec = playbook.steps.get(step)
    retry = spec.spec.retry if spec is not None else None
    if retry is not None:
        return retry.max_attempts
    if (error or {}).get("kind") == "lost":
        return policies.LOST_ATTEMPTS
    return None


def _retries(sr: st.StepRun, playbook: model.Playbook) -> list[Wait]:
    found = []
    for index, at in sr.retry_at.items():
        error = sr.retry_errors.get(index) or None
        found.append(
            Wait(
                RETRY,
                sr.step,
                _index(index),
                at,
                sr.attempts.get(index, 0) + 1,
                max_attempts(playbook, sr.step, error),
                error,
            )
        )
    return found


def _final_step_retries(state: st.ExecutionState, playbook: model.Playbook) -> list[Wait]:
    """The retry timers of the final steps: a compensation's (naming the step it undoes)
    and a teardown step's."""
    found = []
    for phase in (state.compensation, state.teardown):
        for item in phase.items if phase is not None else ():
            if item.retry_at is None or item.command_id is not None:
                continue
            found.append(
                Wait(
                    RETRY,
                    item.target,
                    None,
                    item.retry_at,
                    item.attempt + 1,
                    max_attempts(playbook, item.target, item.error),
                    item.error,
                    undoes=item.step if isinstance(item, fs.CompensationItem) else None,
                )
            )
    return found


def _approvals(state: st.ExecutionState) -> list[Wait]:
    return [
        Wait(APPROVAL, a.step, due_at=a.expires_at, approval_id=str(a.approval_id))
        for a in state.approvals.values()
        if a.status == ap.PENDING
    ]


def _cancel(state: st.ExecutionState, playbook: model.Playbook) -> list[Wait]:
    if not cancellation.cancel_stops_work(state) or not state.commands:
        return []
    asked = state.cancel_requested_at
    due = None if asked is None else asked + playbook.executor.cancel_grace
    return [Wait(CANCEL_GRACE, due_at=due)]


def _commands(state: st.ExecutionState, facts: Facts) -> list[Wait]:
    found = []
    driver = facts.driver
    for cid, cmd in state.commands.items():
        row = facts.commands.get(cid)
        worker = row.worker_id if row is not None else None
        retrying = cmd.retrying
        if retrying is not None and (row is None or row.status != QUEUED_STATUS):
            found.append(
                Wait(
                    POLICY_RETRY,
                    cmd.step,
                    _index(cmd.index),
                    retrying.not_before,
                    retrying.attempt,
                    retrying.attempts,
                    retrying.error,
                    task=retrying.task,
                    worker=worker,
                    pool=cmd.pool,
                    command_id=str(cid),
                )
            )
            continue
        if row is None:
            continue  # settled since the fold was read, or the table was not read
        if row.status == QUEUED_STATUS:
            unserved = driver is None and row.pool not in facts.live_pools
            kind, due = (NO_WORKER if unserved else QUEUED), None
        else:
            kind, due = CLAIMED, row.lease_expires_at
        found.append(
            Wait(
                kind,
                cmd.step,
                _index(cmd.index),
                due,
                cmd.attempt,
                worker=worker,
                pool=row.pool,
                command_id=str(cid),
            )
        )
    return found


def _grouped(found: list[Wait]) -> list[Wait]:
    """One wait per (kind, step): the first due, with the count of the group."""
    rank = {kind: i for i, kind in enumerate(ORDER)}
    groups: dict[tuple[str, str | None], list[Wait]] = {}
    for wait in found:
        groups.setdefault((wait.kind, wait.step), []).append(wait)
    out = []
    for group in groups.values():
        first = min(
            group,
            key=lambda w: (
                w.due_at if w.due_at is not None else float("inf"),
                -1 if w.index is None else w.index,
            ),
        )
        out.append(replace(first, count=len(group)))
    return sorted(out, key=lambda w: (rank[w.kind], w.step or "", w.index or 0))
