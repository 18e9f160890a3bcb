"""The typed, normalized playbook: what `playbook.load` produces and `core` reads.

Everything here is already validated and rewritten from legacy forms. Template-bearing
values (strings that may contain `{{ ... }}`) are kept as written; they are rendered
later (see `playbook.render`). The models are frozen so a loaded playbook can be shared
between the orchestrator and workers without copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_FROZEN = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

RESERVED_NAMES = frozenset(
    [
        "workload",
        "ctx",
        "iter",
        "execution_id",
        "keychain",
        "event",
        "output",
        "context",
        "args",
        "input_data",
        "loop_index",
        "idempotency_key",
        "operation_key",
        "compensation",
        "teardown",
        "usage",
    ]
)

BackoffKind = Literal["none", "fixed", "linear", "exponential"]
PolicyAction = Literal["continue", "retry", "jump", "break", "fail"]


class Metadata(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")
    name: str
    path: str


class RetrySpec(BaseModel):
    """`spec.retry` (DSL 10.1): re-run a failed attempt when its error kind allows."""

    model_config = _FROZEN
    max_attempts: int = 3
    backoff: BackoffKind = "none"
    delay: float = 1.0
    max_delay: float = 300.0
    retry_on: tuple[str, ...] = ("timeout", "lost", "connection")


class ApprovalSpec(BaseModel):
    """`spec.approval` (DSL 10.3). Validated at load; enforced by the approval issue."""

    model_config = _FROZEN
    required: Any = True
    approvers: tuple[str, ...]
    quorum: int = 1
    expires_in: float | None = None
    allow_self_approval: bool = False
    policy_check: Any = None
    policy_reason: Any = None
    risk: Literal["low", "medium", "high"] = "medium"


class AdmitRule(BaseModel):
    """One `spec.policy.admit.rules` entry; `when is None` is the `else` rule."""

    model_config = _FROZEN
    when: Any = None
    allow: bool = True


class StepSpec(BaseModel):
    model_config = _FROZEN
    timeout: float | None = None
    retry: RetrySpec | None = None
    liveness: float | None = None
    admit: tuple[AdmitRule, ...] = ()
    approval: ApprovalSpec | None = None
    compensation: str | None = None
    pool: str | None = None
    """`spec.pool`, else `executor.spec.pool` (DSL 10.6); None: the default pool."""


class PolicyThen(BaseModel):
    model_config = _FROZEN
    do: PolicyAction = "continue"
    attempts: int = 3
    backoff: BackoffKind = "none"
    delay: float = 1.0
    to: str | None = None
    set: dict[str, Any] = Field(default_factory=dict)


class PolicyRule(BaseModel):
    """A task policy rule; `when is None` marks the `else` rule."""

    model_config = _FROZEN
    when: Any = None
    then: PolicyThen = Field(default_factory=PolicyThen)


class TaskPolicy(BaseModel):
    model_config = _FROZEN
    rules: tuple[PolicyRule, ...] = ()
    on_unmatched: Literal["continue", "fail"] | None = None


class Task(BaseModel):
    """One tool call: the single tool of a step, or one task of a pipeline."""

    model_config = _FROZEN
    name: str
    kind: str
    input: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    """Every other tool field (url, code, query, ...), still templated."""
    policy: TaskPolicy | None = None
    set: dict[str, Any] = Field(default_factory=dict)
    timeout: float | None = None
    """The tool's own `spec.timeout`, if any (a step's `spec.timeout` bounds the attempt)."""


class Loop(BaseModel):
    in_: Any = Field(alias="in")
    iterator: str = "item"
    mode: Literal["sequential", "parallel"] = "sequential"
    max_in_flight: Any = 10

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Arc(BaseModel):
    model_config = _FROZEN
    step: str
    when: Any = None
    """None means always true."""
    set: dict[str, Any] = Field(default_factory=dict)
    args: dict[str, Any] = Field(default_factory=dict)
    """Legacy `args`/`data`: extra input for that run of the target step."""


class Next(BaseModel):
    model_config = _FROZEN
    mode: Literal["exclusive", "inclusive"] = "exclusive"
    arcs: tuple[Arc, ...] = ()


class Step(BaseModel):
    model_config = _FROZEN
    name: str
    desc: str | None = None
    input: dict[str, Any] = Field(default_factory=dict)
    tasks: tuple[Task, ...]
    pipeline: bool = False
    """True when `tool` was a list: the step result is the merged mapping of DSL 4."""
    loop: Loop | None = None
    set: dict[str, Any] = Field(default_factory=dict)
    next: Next = Field(default_factory=Next)
    spec: StepSpec = Field(default_factory=StepSpec)


class WorkbookEntry(BaseModel):
    model_config = _FROZEN
    name: str
    desc: str | None = None
    task: Task


SECRET_PROVIDERS = ("env", "milepost", "gcp", "aws", "azure")
"""Where a keychain `kind: secrets` entry fetches its fields (`attempt.secret_providers`)."""


class KeychainEntry(BaseModel):
    model_config = _FROZEN
    name: str
    kind: Literal["credential", "static", "bearer", "secrets"]
    credential: str | None = None
    map: dict[str, Any] = Field(default_factory=dict)
    """`static`: field -> template; `secrets`: field -> the provider's path (a template)."""
    token: Any = None
    provider: str | None = None
    """`secrets`: where the values are fetched (`attempt.secret_providers`)."""


class Budget(BaseModel):
    """`executor.spec.budget` (DSL 10.6): usage past which the run fails (`core.budget`)."""

    model_config = _FROZEN
    tokens: int | None = None
    cost: float | None = None


class ExecutorSpec(BaseModel):
    model_config = _FROZEN
    entry_step: str | None = None
    no_next_is_error: bool = False
    timeout: float | None = None
    retry: RetrySpec | None = None
    liveness: float | None = None
    cancel_grace: float = 30.0
    pool: str | None = None
    """`executor.spec.pool`: the pool of steps that name none (DSL 10.6)."""
    budget: Budget | None = None
    stall_after: float | None = None
    """Fail a run that records no progress event for this long (DSL 10.6); None: never."""
    teardown: tuple[str, ...] = ()
    """The steps run once each, in this order, after the run's outcome is decided, whatever
    it is (`executor.spec.teardown`, docs/language.md)."""


@dataclass(frozen=True, slots=True)
class StepReads:
    """The render-context names a step's templates read, by who renders them and when
    (`playbook.reads`); None: any name (the whole context)."""

    start: frozenset[str] | None = None
    """The server, as the step starts: admission rules, `loop.in`, `max_in_flight`."""
    attempt: frozenset[str] | None = None
    """The worker, for each attempt: what its command's context must carry."""
    exit: frozenset[str] | None = None
    """The server, as the step completes: its `set` and its arcs."""


READS_ALL = StepReads()


class Playbook(BaseModel):
    model_config = _FROZEN
    metadata: Metadata
    workload: dict[str, Any] = Field(default_factory=dict)
    keychain: tuple[KeychainEntry, ...] = ()
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)
    workbook: dict[str, WorkbookEntry] = Field(default_factory=dict)
    steps: dict[str, Step]
    """In document order."""
    entry_step: str
    joins: frozenset[str] = frozenset()
    """Steps targeted by arcs of more than one step (DSL 8, join barrier)."""
    reaches: dict[str, frozenset[str]] = Field(default_factory=dict)
    """For each join J: the steps that can reach J through arcs without passing through J."""
    reads: dict[str, StepReads] = Field(default_factory=dict)
    """For each step: the render-context names its templates read. A step missing here
    reads the whole context."""
    warnings: tuple[str, ...] = ()
    source: str | None = None
    """The file it was loaded from, for messages."""

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def path(self) -> str:
        return self.metadata.path

    def step(self, name: str) -> Step:
        return self.steps[name]

    def reads_of(self, step: str) -> StepReads:
        return self.reads.get(step, READS_ALL)
