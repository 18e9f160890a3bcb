"""The store contract: what the engine, workers and CLI need from a database.

The event log is the truth. `append` writes events and, in the same transaction, the
projections derived from them (`execution` for the list view, `command` for the claim
queue), so the projections can always be rebuilt from the log. Adapters: `sqlite`
(embedded default) and, later, `postgres`; one contract suite runs against both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from milepost.core.events import Event

COMMAND_QUEUED = "queued"
COMMAND_CLAIMED = "claimed"
COMMAND_COMPLETED = "completed"
COMMAND_FAILED = "failed"
COMMAND_CANCELLED = "cancelled"

BLOB_THRESHOLD = 256 * 1024
"""Payloads larger than this (bytes of JSON) go to the result store, referenced from the event."""


@dataclass(frozen=True, slots=True)
class ExecutionRow:
    execution_id: int
    path: str
    version: int | None
    status: str
    created_at: float
    updated_at: float
    parent_execution_id: int | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class Lease:
    """A live claim: reports must carry `epoch`; it lapses at `expires_at` without a heartbeat."""

    command_id: int
    worker_id: str
    epoch: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    path: str
    version: int
    content: str
    created_at: float


class Store(Protocol):
    def migrate(self) -> int:
        """Bring the schema to the latest version; returns it."""
        ...

    def close(self) -> None: ...

    # events
    def append(self, events: Sequence[Event]) -> list[Event]:
        """Append in one transaction with the projections; returns the events stored (with
        `seq`), leaving out those whose `event_id` the log already had."""
        ...

    def load(self, execution_id: int, after_seq: int = 0) -> list[Event]: ...

    def event_count(self, execution_id: int) -> int: ...

    # executions
    def get_execution(self, execution_id: int) -> ExecutionRow | None: ...

    def list_executions(
        self, *, status: str | None = None, path: str | None = None, limit: int = 100,
        offset: int = 0,
    ) -> list[ExecutionRow]: ...

    # commands
    def get_command(self, command_id: int) -> CommandRow | None: ...

    def open_commands(self, execution_id: int | None = None) -> list[CommandRow]:
        """Commands queued or claimed (not yet completed, failed or cancelled)."""
        ...

    def claim(self, command_id: int, worker_id: str, now: float, lease_s: float) -> Lease:
        """Take a queued command (or renew this worker's own live claim); raises ClaimRefused."""
        ...

    def heartbeat(self, command_id: int, worker_id: str, epoch: int, now: float,
                  lease_s: float) -> Lease:  # fmt: skip
        ...

    def expired_claims(self, now: float) -> list[CommandRow]: ...

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
