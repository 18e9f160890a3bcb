"""Request and response models of the HTTP API (the wire shapes; core keeps dataclasses).

The types they are built on, and the checks every request value passes, are in
`milepost.api.checks`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, model_validator

from milepost import credentials
from milepost.api.checks import (
    NO_NUL,
    FreeJson,
    IdOut,
    StrictIn,
    TimeOut,
    WireId,
    Workload,
)
from milepost.api.schemas_diagnosis import WaitOut as WaitOut
from milepost.api.schemas_events import BatchEventIn as BatchEventIn
from milepost.api.schemas_events import Envelope as Envelope
from milepost.api.schemas_events import EventIn as EventIn
from milepost.api.schemas_workers import POOL_PATTERN, WorkerIn
from milepost.api.schemas_workers import NoLiveWorkerOut as NoLiveWorkerOut
from milepost.ids import MAX_ID, MAX_MACHINE

# -- catalog ---------------------------------------------------------------------------------


class RegisterIn(StrictIn):
    content: str = Field(min_length=1, description="The playbook YAML.")


class CatalogRef(StrictIn):
    """A catalog entry by `path` (+ `version`, default the latest) or by `catalog_id`."""

    path: str | None = Field(default=None, json_schema_extra=NO_NUL)
    version: int | None = Field(default=None, ge=1, le=MAX_ID)
    catalog_id: str | None = Field(
        default=None, description='"<path>@<version>"', json_schema_extra=NO_NUL
    )

    @model_validator(mode="after")
    def _one_way(self) -> CatalogRef:
        if self.catalog_id is None and not self.path:
            raise ValueError("give `path` (and optionally `version`) or `catalog_id`")
        return self

    def key(self) -> tuple[str, int | None]:
        if self.catalog_id is not None:
            path, sep, version = self.catalog_id.rpartition("@")
            if not sep or not path or not version.isdigit():
                raise ValueError(f"catalog_id {self.catalog_id!r} is not '<path>@<version>'")
            return path, int(version)
        assert self.path is not None
        return self.path, self.version


class ListIn(StrictIn):
    path: str | None = Field(default=None, json_schema_extra=NO_NUL)


class CatalogEntryOut(BaseModel):
    path: str
    version: int
    catalog_id: str
    created_at: TimeOut | None = None


class CatalogListOut(BaseModel):
    entries: list[CatalogEntryOut]


class CatalogResourceOut(CatalogEntryOut):
    content: str


# -- executions ------------------------------------------------------------------------------


class ExecuteIn(CatalogRef):
    workload: Workload = Field(
        default_factory=dict, validation_alias=AliasChoices("workload", "payload")
    )
    parent_execution_id: WireId | None = None
    parent_command_id: WireId | None = Field(
        default=None,
        description=(
            "[milepost extension] The command that starts this child; with `parent_epoch`, the "
            "proof a worker token needs (the live claim of that command)."
        ),
    )
    parent_epoch: int | None = Field(
        default=None,
        ge=1,
        description=("[milepost extension] The epoch of the claim of `parent_command_id`."),
    )

    @model_validator(mode="after")
    def _proof_whole(self) -> ExecuteIn:
        if (self.parent_command_id is None) != (self.parent_epoch is None):
            raise ValueError("give `parent_command_id` and `parent_epoch` together")
        return self


class ExecuteOut(BaseModel):
    execution_id: IdOut
    status: str


class ExecutionItem(BaseModel):
    execution_id: IdOut
    path: str
    version: int | None
    status: str
    created_at: TimeOut | None
    updated_at: TimeOut | None
    parent_execution_id: IdOut | None
    ended_at: TimeOut | None = Field(None, description="When it ended; null while it runs.")
    duration_s: float | None = Field(None, description="Seconds from start to end.")
    started_by: str | None = Field(None, description="Who started it (`user:<name>`, ...).")
    steps_done: int | None = Field(
        None, description=("In the list: how many of its steps have exited (run to an end).")
    )
    steps_total: int | None = Field(None, description="In the list: its playbook's steps.")
    waiting: WaitOut | None = Field(
        None,
        description=(
            "In the list: what a running run waits on first (its `waits`' first); null "
            "when it ended or nothing blocks it."
        ),
    )


class ExecutionList(BaseModel):
    items: list[ExecutionItem]
    limit: int
    offset: int
    next: str | None = Field(
        None,
        description=(
            "The `cursor` of the next page (keyset: the last row of this one); null when this "
            "page is the last."
        ),
    )


class EventOut(BaseModel):
    event_id: IdOut
    execution_id: IdOut
    seq: int
    event_type: str
    step: str | None
    status: str | None
    result: dict[str, Any]
    meta: dict[str, Any]
    worker_id: str | None
    parent_event_id: IdOut | None
    created_at: TimeOut | None


class UsageEntry(BaseModel):
    provider: str = Field(description="As the tool reported it; empty when it named none.")
    model: str
    input_tokens: int
    output_tokens: int
    tokens: int = Field(description="input_tokens + output_tokens.")
    cost: float


class UsageOut(BaseModel):
    """What the tools reported using (DSL 10.6), summed, and per (provider, model)."""

    tokens: int
    input_tokens: int
    output_tokens: int
    cost: float
    by: list[UsageEntry]


class PlaybookUsage(UsageEntry):
    path: str


class UsageList(BaseModel):
    items: list[PlaybookUsage]


class RunProgress(BaseModel):
    """What the execution and the status replies show of a run as it goes."""

    error: dict[str, Any] | None
    steps: dict[str, Any]
    compensating: bool = Field(
        False,
        description=(
            "The run is undoing its completed steps before it ends (DSL 10.5): `status` is "
            "still RUNNING."
        ),
    )
    compensation: dict[str, Any] | None = Field(
        None,
        description=(
            "`{compensating, outcome, items: [{step, run, compensation, status, attempt, "
            "result, error}]}` once the run started compensating, else null."
        ),
    )
    tearing_down: bool = Field(
        False,
        description=(
            "The run's outcome is decided and its teardown steps (`executor.spec.teardown`) "
            "run before it ends: `status` is still RUNNING."
        ),
    )
    teardown: dict[str, Any] | None = Field(
        None,
        description=(
            "`{tearing_down, status, items: [{step, run, status, attempt, result, error}]}` "
            "once the run started tearing down (`status`: the one it ends with, whatever "
            "the teardown steps do), else null."
        ),
    )
    no_live_worker: list[NoLiveWorkerOut] = Field(
        default_factory=list,
        description="Pools this run waits on with no live worker: "
        "start `milepost worker --pool <pool>`.",
    )
    usage: UsageOut | None = Field(
        None, description=("Usage the run's tools reported (DSL 10.6); null when none did.")
    )
    waits: list[WaitOut] = Field(
        default_factory=list,
        description=(
            "What the run waits on now (a retry timer, an approval, a queued or claimed "
            "command, a cancel's grace), the most blocking first; empty once it ended."
        ),
    )


class StatusOut(RunProgress):
    execution_id: IdOut
    status: str


class ExecutionOut(ExecutionItem, RunProgress):
    events: list[EventOut]
    events_next: int | None = Field(
        description="`events_after` for the next page, null when this page is the last."
    )
    last_seq: int = Field(
        0,
        description=(
            "The seq its log ends at as this reply was made (seqs count from 1, without gaps):"
            " follow its stream from there (`?after=`) to get only what comes next."
        ),
    )


class CancelOut(BaseModel):
    execution_id: IdOut
    status: str


# -- approvals (DSL 10.3) --------------------------------------------------------------------

ExecutionStatus = Literal["RUNNING", "COMPLETED", "FAILED", "CANCELLED"]
ApprovalStatus = Literal["pending", "granted", "denied", "expired", "invalidated", "cancelled"]
Risk = Literal["low", "medium", "high"]


class VoteOut(BaseModel):
    identity: str = Field(description="Who voted: `user:<name>`.")
    decision: Literal["approve", "deny"]
    reason: str | None
    at: TimeOut | None


class ApprovalItem(BaseModel):
    """An approval request as the list shows it."""

    approval_id: IdOut
    execution_id: IdOut
    path: str = Field(description="The playbook of the execution.")
    step: str
    run: int
    status: ApprovalStatus
    risk: str
    approvers: list[str] = Field(description="Who may decide: `role:<name>`, `user:<name>`.")
    quorum: int
    approved: int = Field(description="Distinct approvals so far (the quorum counts them).")
    expires_at: TimeOut | None
    requested_at: TimeOut | None
    decided_at: TimeOut | None
    started_by: str | None = Field(description="Who started the run (an identity).")
    digest: str = Field(description="SHA-256 of the calls approvers approve.")


class ApprovalOut(ApprovalItem):
    """One approval with what the step will do, the votes and how it closed."""

    kind: str | None
    calls: list[dict[str, Any]] = Field(
        description="`[{index, input, digest}]`: each command the step will issue, as rendered "
        "(secrets redacted)."
    )
    policy: str | None
    allow_self_approval: bool
    votes: list[VoteOut]
    outcome: dict[str, Any] | None = Field(
        description="The payload of the event that closed it (granted, denied, expired, "
        "invalidated); null while pending or when cancelled."
    )


class ApprovalList(BaseModel):
    items: list[ApprovalItem]
    limit: int
    next: IdOut | None = Field(description="`after` for the next page; null on the last.")


class DecisionIn(StrictIn):
    decision: Literal["approve", "deny"]
    reason: str | None = Field(default=None, max_length=2000)


# -- events ----------------------------------------------------------------------------------


# -- commands --------------------------------------------------------------------------------


class ClaimIn(StrictIn):
    worker_id: str = Field(min_length=1, max_length=200, json_schema_extra=NO_NUL)
    lease_seconds: float | None = Field(default=None, gt=0, le=3600)


class ClaimNextIn(ClaimIn):
    pool: str | None = Field(default=None, max_length=100, json_schema_extra=NO_NUL)
    limit: int = Field(default=1, ge=1, le=100)


class HeartbeatIn(ClaimIn):
    epoch: int = Field(ge=0, le=MAX_ID)


class ReleaseIn(StrictIn):
    worker_id: str = Field(min_length=1, max_length=200, json_schema_extra=NO_NUL)
    epoch: int = Field(ge=0, le=MAX_ID)


class LeaseOut(BaseModel):
    epoch: int
    expires_at: TimeOut | None
    lease_seconds: float | None = None
    """How long the claim or heartbeat extended it (the step's `spec.liveness`, else what
    the worker asked): the worker heartbeats every third of it."""


class PlaybookRef(BaseModel):
    path: str
    version: int | None


class CommandOut(BaseModel):
    command_id: IdOut
    event_id: IdOut
    execution_id: IdOut
    step: str
    run: int
    index: int
    attempt: int
    idempotency_key: str
    status: str
    playbook: PlaybookRef
    context: dict[str, Any]
    loop_steps: dict[str, dict[str, int]]
    args: dict[str, Any]
    lease: LeaseOut | None = None
    approved_digest: str | None = None
    """The digest of the approved call (`spec.approval`): the worker refuses another call."""
    approval_expires_at: str | None = None
    """When that approval expires (ISO-8601): the worker refuses to start the tool then."""
    traceparent: str | None = Field(
        default=None,
        description="[milepost extension] W3C trace context of the run: the "
        "worker's span of this attempt is its child; its report carries the attempt's own "
        "in `meta.traceparent`.",
    )


# a batch of events comes after the commands: a report may claim the next ones


class EventBatchIn(StrictIn):
    events: list[BatchEventIn] = Field(
        max_length=10_000, description="Empty: nothing is stored (`stored: 0`)."
    )
    execution_id: WireId | None = Field(
        default=None,
        description="[NoETL] the execution of the events that name none (NoETL's batch form).",
    )
    worker_id: str | None = Field(
        default=None,
        max_length=200,
        json_schema_extra=NO_NUL,
        description="[NoETL] the worker of the events that name none.",
    )
    claim: ClaimNextIn | None = Field(
        default=None,
        description="[milepost extension] claim the reporting worker's next "
        "commands in the same transaction; they come back in `commands`.",
    )


class IngestOut(BaseModel):
    accepted: int
    stored: int
    event_ids: list[IdOut]
    stale: list[IdOut] = Field(
        default_factory=list, description="[milepost extension] ids stored as stale reports."
    )
    ignored: list[IdOut] = Field(
        default_factory=list,
        description="[milepost extension] ids of reports accepted but "
        "not stored: their execution had already ended, and its log ends with its end.",
    )
    ignored_reasons: dict[str, str] | None = Field(
        default=None,
        description="[milepost extension] why each id of `ignored` was not "
        "stored (left out when nothing was ignored).",
    )
    stored_ids: list[IdOut] = Field(
        default_factory=list,
        description="[milepost extension] the ids written by this "
        "call (`stored` of them; stale ones included).",
    )
    duplicates: list[IdOut] = Field(
        default_factory=list,
        description="[milepost extension] ids the log already held "
        "for the same event: accepted, not stored again.",
    )
    commands: list[CommandOut] | None = Field(
        default=None,
        description="[milepost extension] the commands claimed for `claim` (left out without it).",
    )


class ClaimNextOut(BaseModel):
    commands: list[CommandOut]


class HeartbeatOut(BaseModel):
    lease: LeaseOut
    cancelled: bool


class ReleaseOut(BaseModel):
    released: bool


# -- workers ---------------------------------------------------------------------------------


class MachineIdIn(StrictIn):
    worker_id: str = Field(min_length=1, max_length=200)
    pool: str = Field(
        default="default",
        pattern=POOL_PATTERN,
        description="The pool the worker claims from (`--pool`): while its "
        "lease lives, that pool has a live worker.",
    )
    machine_id: int | None = Field(
        default=None,
        ge=0,
        le=MAX_MACHINE,
        description="The id held now, to renew (or the one the worker mints on, "
        "`MILEPOST_MACHINE_ID`: leased when free); left out to lease a new one.",
    )
    worker: WorkerIn | None = Field(
        default=None,
        description="The worker's check-in (the workers registry, `GET /api/workers`).",
    )
    release: bool = Field(
        default=False,
        description="A clean stop: `machine_id` is given back and the worker leaves the registry.",
    )


class MachineIdOut(BaseModel):
    machine_id: int
    expires_at: float
    """Seconds since the epoch; renew well before."""
    renewed: bool
    """False when `machine_id` is a new lease (the one asked for was lost, or none was)."""


# -- credentials -----------------------------------------------------------------------------


class CredentialIn(StrictIn):
    name: Annotated[str, AfterValidator(credentials.check_name)] = Field(
        description=credentials.NAME_RULE
    )
    type: str = Field(min_length=1, max_length=100, json_schema_extra=NO_NUL)
    data: FreeJson


class CredentialOut(BaseModel):
    name: str
    type: str
    created_at: TimeOut | None = None
    updated_at: TimeOut | None = None
    data: dict[str, Any] | None = Field(
        default=None, description="Only with include_data=true, for the worker and admin roles."
    )


class CredentialList(BaseModel):
    items: list[CredentialOut]


class DeletedOut(BaseModel):
    deleted: bool


class HealthOut(BaseModel):
    status: str


# -- errors ----------------------------------------------------------------------------------
# What `milepost.api.errors` answers (docs/server-contract.md, Errors): documentation only,
# the handlers build the bodies as dicts.


class ErrorOut(BaseModel):
    """Every 4xx/5xx body: a stable `code`, a `message`, and fields that name the thing."""

    model_config = ConfigDict(extra="allow")

    code: str = Field(description="Stable, e.g. `execution_not_found`, `stale_epoch`.")
    message: str


class FieldError(BaseModel):
    loc: list[str | int] = Field(description='Where, e.g. ["body", "events", 0, "step"].')
    msg: str


class ValidationErrorOut(ErrorOut):
    """422: `validation_error` with `errors`, or `playbook_invalid` with `problems`."""

    errors: list[FieldError] | None = None
    problems: list[str] | None = None
