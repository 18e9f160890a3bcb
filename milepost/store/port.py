"""The store contract: what the engine, workers and CLI need from a database.

The event log is the truth. `append` writes events and, in the same transaction, the
projections derived from them (`execution` for the list view, `command` for the claim
queue; `store.projection`, a pure function of events), so the projections can always be
rebuilt from the log: claims and releases are events too. Adapters: `store.sql` written
once with its dialects `sqlite` (embedded default) and `postgres`, `sharded` over several,
`memory` for tests; one contract suite runs against all of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from milepost.core import events as ev
from milepost.core.events import Event, jsonable
from milepost.errors import ClaimRefused, ConcurrencyConflict, MilepostError
from milepost.records import record
from milepost.store.approvals import ApprovalRow as ApprovalRow
from milepost.store.approvals import Approvals
from milepost.store.attempt_logs import LOG_PAGE as LOG_PAGE
from milepost.store.attempt_logs import AttemptLogs
from milepost.store.attempt_logs import LogRow as LogRow
from milepost.store.driver_leases import DriverBusy as DriverBusy
from milepost.store.driver_leases import DriverLease as DriverLease
from milepost.store.driver_leases import DriverLeases
from milepost.store.machine_ids import MACHINE_IDS as MACHINE_IDS
from milepost.store.machine_ids import RETAKE_AFTER_S as RETAKE_AFTER_S
from milepost.store.machine_ids import MachineIds
from milepost.store.machine_ids import MachineIdsExhausted as MachineIdsExhausted
from milepost.store.machine_ids import MachineLease as MachineLease
from milepost.store.machine_ids import pick_machine_id as pick_machine_id
from milepost.store.usage import UsageReads
from milepost.store.usage import UsageRow as UsageRow
from milepost.store.workers import WorkerNameTaken as WorkerNameTaken
from milepost.store.workers import WorkerRow as WorkerRow
from milepost.store.workers import Workers
from milepost.store.workers import check_bound as check_bound

COMMAND_QUEUED = "queued"
COMMAND_CLAIMED = "claimed"
COMMAND_COMPLETED = "completed"
COMMAND_FAILED = "failed"
COMMAND_CANCELLED = "cancelled"

BLOB_THRESHOLD = 256 * 1024
"""Payloads larger than this (bytes of JSON) go to the result store, referenced from the event."""


Keyset = tuple[float, int]
"""A (time, execution_id) position in a list of executions ordered by both."""


@record
class ExecutionRow:
    execution_id: int
    path: str
    version: int | None
    status: str
    created_at: float
    updated_at: float
    parent_execution_id: int | None = None
    error: dict[str, Any] | None = None
    cancel_requested: bool = False
    """An `execution.cancel_requested` event is in the log: claims are refused from then on."""
    started_by: str | None = None
    """Who started it (`user:<name>`, `token:<name>`), from its `execution.started`."""


@record
class CommandRow:
    command_id: int
    execution_id: int
    step: str
    run: int
    index: int
    attempt: int
    idempotency_key: str
    status: str
    worker_id: str | None
    epoch: int
    lease_expires_at: float | None
    created_at: float
    pool: str = "default"
    """The workers it goes to (`spec.pool`, DSL 10.6)."""


@record
class Lease:
    """A live claim: reports must carry `epoch`; it lapses at `expires_at` without a heartbeat."""

    command_id: int
    worker_id: str
    epoch: int
    expires_at: float
    event: Event | None = field(default=None, compare=False, repr=False)
    """The `command.claimed` the claim appended, numbered, when the store hands it back:
    an orchestrator that made the claim folds it instead of reading its log again."""
    lease_s: float | None = field(default=None, compare=False)
    """How long the claim (or heartbeat) extended it: the command's own lease when its step
    sets `spec.liveness`, else the one asked for. Its holder heartbeats every third of it."""


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    path: str
    version: int
    content: str
    created_at: float


@dataclass(frozen=True, slots=True)
class CredentialRow:
    name: str
    type: str
    ciphertext: bytes | None
    """The encrypted data; None in `list_credentials` (which never reads it)."""
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class TokenRow:
    token_hash: str
    """SHA-256 (hex) of the bearer token; the token itself is never stored."""
    role: str
    name: str | None
    created_at: float
    user: str | None = None
    """Who holds it (`user:<user>` is the identity an approval vote is cast as)."""
    approver_roles: tuple[str, ...] = ()
    """Business roles (`role:<name>` entries of an approval's approvers), beside `role`."""


class StoreError(MilepostError):
    """The database failed."""

    code = "store_error"


class StoreUnavailable(StoreError):
    """The database cannot be reached."""

    code = "store_unavailable"


class NoDatabase(MilepostError):
    """There is no milepost database where the URL points (a command that only reads
    creates none: `factory.open_store(existing=True)`)."""

    code = "no_database"


class LogMoved(ConcurrencyConflict):
    """`append(..., expect=...)`: another writer appended to one of these executions since
    the caller last read it, so decisions made on the older state must be made again."""

    code = "log_moved"


class ClaimMoved(ConcurrencyConflict):
    """`append(..., check_claims=True)`: a command reported on is no longer claimed with the
    report's epoch (released, re-claimed, settled), or one the engine settles is no longer
    as it read it (`fences`), so nothing was written; the caller fences the reports
    against the command rows (or reads again) and decides again."""

    code = "claim_moved"


class EventIdConflict(MilepostError):
    """An event id the log already holds names a different event (another execution, type,
    step or content): nothing of the append was written."""

    code = "event_id_conflict"


_SERVER_MARKS = frozenset({"stale", "stale_reason"})
"""Meta keys the server adds to what a client sent: a repeat is compared without them."""


def _identity(event: Event) -> tuple[Any, ...]:
    # what the client sent, not when it arrived: `created_at` is the server's clock when
    # the client gave none, so a retried report may differ there and still be the same
    meta = {k: v for k, v in event.meta.items() if k not in _SERVER_MARKS}
    # as the log keeps it (JSON: string keys, lists for tuples), then in one key order
    kept = jsonable([event.payload, meta])
    content = json.dumps(kept, sort_keys=True)
    return event.execution_id, event.event_type, event.step, content


def same_event(stored: Event, new: Event) -> bool:
    """A repeated `event_id` is the same event: same execution, type, step and content."""
    return stored.event_id == new.event_id and _identity(stored) == _identity(new)


def new_events(events: Iterable[Event], known: Mapping[int, Event]) -> list[Event]:
    """The events to store: those whose id neither `known` (the log's events of these ids)
    nor an earlier event of the batch holds. A repeat of the same event is left out; a
    repeat that is another event raises EventIdConflict."""
    held = dict(known)
    out: list[Event] = []
    clashes: list[tuple[Event, Event]] = []
    for event in events:
        prior = held.get(event.event_id)
        if prior is None:
            held[event.event_id] = event
            out.append(event)
        elif not same_event(prior, event):
            clashes.append((prior, event))
    if clashes:
        raise event_id_conflict(clashes)
    return out


def event_id_conflict(clashes: Sequence[tuple[Event, Event]]) -> EventIdConflict:
    ids = sorted({str(new.event_id) for _, new in clashes})
    xids = sorted({str(e.execution_id) for pair in clashes for e in pair})
    return EventIdConflict(
        f"event id {ids[0]} is already in the log for another event",
        event_ids=ids,
        execution_ids=xids,
    )


_CLAIM_ENDS = ev.SETTLING_REPORTS | {ev.COMMAND_LEASE_EXPIRED}


@record
class Fence:
    """What an append requires of a command row its event settles or expires: the row is
    at `epoch`, claimed, or (`open`) queued or claimed. A worker's report and a lease
    expiry need the claim they came from; the engine's own settlement (`ev.SETTLES`) needs
    the row as it read it, nobody's claim taken since."""

    epoch: int
    open: bool = False

    def holds(self, status: str, epoch: int) -> bool:
        return epoch == self.epoch and (
            status == COMMAND_CLAIMED or (self.open and status == COMMAND_QUEUED)
        )


def fences(events: Sequence[Event], check_claims: bool) -> dict[int, Fence]:
    """command_id -> what the append requires of its row, stale events left out: the
    engine's settlements always (`ev.SETTLES`); with `check_claims`, the reports that
    settle a command and the lease expiries that lose one too (a report committed first:
    the expiry is not written)."""
    return {
        int(e.payload["command_id"]): Fence(int(e.meta["epoch"]), open=True)
        if e.meta.get(ev.SETTLES)
        else Fence(int(e.meta["epoch"]))
        for e in events
        if e.event_type in _CLAIM_ENDS
        and not e.meta.get("stale")
        and (check_claims or e.meta.get(ev.SETTLES))
    }


@record
class ClaimRequest:
    """Claim queued commands in the transaction of an append: a worker's report is answered
    with its next commands in one commit instead of two (`append_and_claim`)."""

    worker_id: str
    now: float
    lease_s: float
    limit: int
    pool: str | None = None
    driver: str | None = None
    """Only commands of executions this holder drives (`execution_driver`): an embedded
    engine claims the runs it drives, not those of another process on the same database;
    None: any."""
    new_id: Callable[[], int] = field(kw_only=True)
    """The ids of the `command.claimed` events the claim appends."""


Claimed = list[tuple[CommandRow, Lease]]


BLOB_PREFIX = "milepost://results/"


def parse_blob_uri(uri: str) -> tuple[int | None, int]:
    """`milepost://results/<blob_id>` or `milepost://results/<execution_id>/<blob_id>` ->
    (execution_id or None, blob_id). The second form names the execution so a sharded store
    can find the shard that holds it."""
    parts = uri[len(BLOB_PREFIX) :].split("/") if uri.startswith(BLOB_PREFIX) else []
    try:
        if len(parts) == 1:
            return None, int(parts[0])
        if len(parts) == 2:
            return int(parts[0]), int(parts[1])
    except ValueError:
        pass
    raise MilepostError(f"not a result reference: {uri!r}", uri=uri)


def claim_epoch(
    command_id: int,
    worker_id: str,
    now: float,
    command: tuple[Any, ...],
    execution: tuple[Any, ...] | None,
) -> int:
    """The claim rule both adapters apply (the caller holds the command row): the epoch the
    claim gets, or ClaimRefused.

    `command` is `(status, worker_id, epoch, lease_expires_at)`, `execution` is
    `(status, cancel_requested)` or None when the execution has no row yet.
    """
    status, owner, epoch, expires = command
    if execution is not None and (execution[1] or execution[0] == "CANCELLED"):
        raise ClaimRefused(
            "the execution is cancelled", reason="execution_cancelled", command_id=str(command_id)
        )
    if status == COMMAND_CLAIMED and owner == worker_id and (expires or 0) > now:
        return int(epoch)  # a repeated claim by the holder renews it
    if status == COMMAND_QUEUED:
        return int(epoch) + 1
    if status == COMMAND_CLAIMED:
        # who holds it, as the NoETL server says: an operator asks that worker, not the log
        raise ClaimRefused(
            f"command has an active claim by worker {owner!r} (epoch {epoch})",
            reason="active_claim",
            command_id=str(command_id),
            worker_id=owner,
            epoch=int(epoch),
            lease_expires_at=expires,
        )
    raise ClaimRefused(
        f"command is {status}", reason="already_terminal", command_id=str(command_id)
    )


class Appends:
    """`append` is `append_and_claim` without a claim, in every store written on this."""

    def append(
        self,
        events: Sequence[Event],
        *,
        expect: Mapping[int, int] | None = None,
        check_claims: bool = False,
    ) -> list[Event]:
        return self.append_and_claim(events, None, expect=expect, check_claims=check_claims)[0]

    def append_and_claim(
        self,
        events: Sequence[Event],
        claim: ClaimRequest | None,
        *,
        expect: Mapping[int, int] | None = None,
        check_claims: bool = False,
    ) -> tuple[list[Event], Claimed]:
        raise NotImplementedError


class Store(Approvals, UsageReads, AttemptLogs, MachineIds, Workers, DriverLeases, Protocol):
    def migrate(self) -> int:
        """Bring the schema to the latest version; returns it."""
        ...

    def close(self) -> None: ...

    # events
    def append(
        self,
        events: Sequence[Event],
        *,
        expect: Mapping[int, int] | None = None,
        check_claims: bool = False,
    ) -> list[Event]:
        """Append in one transaction with the projections; returns the events stored (with
        `seq`), leaving out those whose `event_id` the log already had for the same event
        (`same_event`). An id the log holds for another event raises EventIdConflict and
        nothing is written.

        `expect` maps executions to the last `seq` the caller folded: if the log of an
        execution these events write to holds an event past it that may change a decision,
        nothing is written and LogMoved is raised (optimistic concurrency between
        orchestrators on one database). Claims and releases (`ev.CLAIM_EVENTS`) past it do
        not count: the events get the seqs after them. When it
        covers every execution written to, the caller vouches that the events are new (it
        has folded those logs; a repeat it passes on costs a retry), which lets a store skip
        its read of repeated ids; an id that is in the log anyway is still left out only
        when it is the same event, else EventIdConflict: never a silent drop.

        `check_claims`: every command a non-stale `command.completed`/`failed` settles must
        be claimed with that report's `meta.epoch`, checked (and held) in the transaction;
        else nothing is written and ClaimMoved is raised. The server fences reports this way
        without reading the command rows first. The engine's own settlements (`ev.SETTLES`)
        are checked whatever `check_claims` says: their rows must still be open at their
        epoch (`fences`)."""
        ...

    def append_and_claim(
        self,
        events: Sequence[Event],
        claim: ClaimRequest | None,
        *,
        expect: Mapping[int, int] | None = None,
        check_claims: bool = False,
    ) -> tuple[list[Event], Claimed]:
        """`append`, then `claim_next` as `claim` asks, in the same transaction where the
        database allows it (the commands just issued are claimable at once). The events
        returned are those of the append; the claims' `command.claimed` come after them in
        the log."""
        ...

    def load(
        self,
        execution_id: int,
        after_seq: int = 0,
        *,
        before_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """The execution's events with `after_seq < seq`, and `seq < before_seq` if given
        (what slipped in before one's own append, without reading that append back); the
        first `limit` of them if given (a page read in the query, not cut from the log)."""
        ...

    def event_count(self, execution_id: int) -> int: ...

    # executions
    def get_execution(self, execution_id: int) -> ExecutionRow | None: ...

    def list_executions(
        self,
        *,
        status: str | None = None,
        path: str | None = None,
        limit: int = 100,
        offset: int = 0,
        since: float | None = None,
        before: Keyset | None = None,
    ) -> list[ExecutionRow]:
        """Newest first, by (created_at, execution_id); `since`: only those created at or
        after it (epoch seconds); `before`: only those whose (created_at, execution_id) is
        below it (a keyset page: the last row of the previous page)."""
        ...

    def steps_exited(self, execution_ids: Sequence[int]) -> dict[int, int]:
        """How many distinct steps of each run have a `step.exit` (the list's progress);
        runs with none are left out."""
        ...

    def changed_executions(self, after: Keyset, limit: int) -> list[ExecutionRow]:
        """The rows whose (updated_at, execution_id) is above `after`, in that order: a new
        run (its updated_at is its start), one whose step exited, or one that ended (the
        change stream)."""
        ...

    # commands
    def get_command(self, command_id: int) -> CommandRow | None: ...

    def get_commands(self, command_ids: Sequence[int]) -> dict[int, CommandRow]:
        """The commands of these ids that exist, by id (one query for a batch of reports)."""
        ...

    def open_commands(self, execution_id: int | None = None) -> list[CommandRow]:
        """Commands queued or claimed (not yet completed, failed or cancelled)."""
        ...

    def claim(
        self,
        command_id: int,
        worker_id: str,
        now: float,
        lease_s: float,
        *,
        new_id: Callable[[], int],
    ) -> Lease:
        """Take a queued command (or renew this worker's own live claim); raises ClaimRefused.
        Appends `command.claimed` (id from `new_id`) in the transaction of the claim."""
        ...

    def heartbeat(
        self, command_id: int, worker_id: str, epoch: int, now: float, lease_s: float
    ) -> Lease:
        """Move the lease end of a live claim; no event: the projection only."""
        ...

    def expired_claims(self, now: float) -> list[CommandRow]:
        """Claims whose lease ended before `now`, by command id."""
        ...

    # snapshots
    def save_snapshot(self, execution_id: int, seq: int, data: bytes) -> None: ...

    def load_snapshot(self, execution_id: int) -> tuple[int, bytes] | None: ...

    # catalog
    def register_playbook(self, path: str, content: str, now: float) -> CatalogEntry: ...

    def get_playbook(self, path: str, version: int | None = None) -> CatalogEntry | None: ...

    def list_playbooks(self) -> list[CatalogEntry]: ...

    # result store
    def put_blob(self, execution_id: int, data: bytes, now: float) -> str: ...

    def get_blob(self, uri: str) -> bytes: ...

    # -- server additions (docs/server-contract.md, "Store additions") ---------------------

    def schema_version(self) -> int:
        """The version the database is at (0 before `migrate`)."""
        ...

    # credentials (data encrypted by the caller; the store never sees plain text)
    def put_credential(self, name: str, type: str, ciphertext: bytes, now: float) -> CredentialRow:
        """Create or replace; `created_at` survives a replace."""
        ...

    def get_credential(self, name: str) -> CredentialRow | None: ...

    def list_credentials(self) -> list[CredentialRow]:
        """Every credential by name, without its data (`ciphertext` None)."""
        ...

    def delete_credential(self, name: str) -> bool:
        """True when there was one to delete."""
        ...

    # API tokens (only their hash is stored)
    def create_token(
        self,
        token_hash: str,
        role: str,
        name: str | None,
        now: float,
        *,
        user: str | None = None,
        approver_roles: Sequence[str] = (),
    ) -> TokenRow:
        """Raises ConcurrencyConflict if the hash is already known."""
        ...

    def get_token(self, token_hash: str) -> TokenRow | None: ...
    def list_tokens(self) -> list[TokenRow]: ...  # oldest first
    def delete_token(self, token_hash: str) -> bool: ...  # a revoke: True when there was one

    # the polling claim path
    def claim_next(
        self,
        worker_id: str,
        now: float,
        lease_s: float,
        limit: int = 1,
        pool: str | None = None,
        *,
        new_id: Callable[[], int],
    ) -> list[tuple[CommandRow, Lease]]:
        """Claim up to `limit` of the oldest queued commands (epoch += 1) of RUNNING
        executions with no cancel requested; `pool` None = any pool. Two workers never get
        the same command. Each claim appends `command.claimed` in the same transaction."""
        ...

    def release(
        self, command_id: int, worker_id: str, epoch: int, now: float, *, new_id: Callable[[], int]
    ) -> bool:
        """Give back a live claim that was not started: the command is queued again, same
        attempt and key (the next claim gets epoch + 1), and `command.released` appended.
        Raises ClaimRefused (`stale_epoch`) when `worker_id` holds no claim with that epoch."""
        ...

    def executions_to_redrive(self, now: float, idle_s: float = 5.0) -> list[int]:
        """RUNNING executions with no queued or claimed command whose last event is older
        than `idle_s` (the reconciler re-evaluates them)."""
        ...

    def running_children(self, execution_id: int) -> list[int]:
        """The RUNNING executions whose parent is `execution_id`, by id (indexed)."""
        ...

    def stalled_executions(self, now: float) -> list[tuple[int, float]]:
        """(execution_id, time of its last event) of RUNNING executions with a stall window
        whose last event is older than it: the candidates, whose live attempts and running
        children the engine reads before `core.liveness.stall_verdict` decides."""
        ...

    def last_event_at(self, execution_id: int) -> float | None:
        """The time of the execution's last event (None: no event)."""
        ...

    def restarts_of(self, execution_id: int) -> list[int]:
        """The runs that restart this one, oldest first (`execution.restarted_from`)."""
        ...

    def overdue_claims(self, now: float, after_s: float) -> list[CommandRow]:
        """Live claims taken more than `after_s` before `now`, heartbeats or not."""
        ...

    def lock_execution(self, execution_id: int) -> AbstractContextManager[None]:
        """Hold the orchestrator's lock on one execution for the block. Reentrant within
        one thread; excludes other threads and, on PostgreSQL, other processes."""
        ...
