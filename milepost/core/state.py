"""The state of one execution: the records the fold of its events (`core.fold`) builds.

The state is a plain mutable object owned by whoever folds it (the orchestrator keeps one
per execution and folds only new events into it). This module holds the records only, with
each concept's own records imported from a module that does not read the state back
(`core.approval_state`, `core.final_step_state`): the fold, and every concept's part of it,
import this module, never the other way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from milepost.core import approval_state as ap
from milepost.core import final_step_state as fs
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
    compensation: fs.Compensation | None = None
    """Set once the run started compensating (`core.compensation_state`)."""
    teardown: fs.Teardown | None = None
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
