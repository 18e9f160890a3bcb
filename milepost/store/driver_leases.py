"""The driver lease of an execution in the embedded mode (table `execution_driver`): the
one process that drives a run, part of `port.Store`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from milepost.errors import ConcurrencyConflict


@dataclass(frozen=True, slots=True)
class DriverLease:
    """The one process that drives an execution in the embedded mode, until `expires_at`
    (table `execution_driver`). `holder` names it for a person: `host:pid:suffix`."""

    execution_id: int
    holder: str
    expires_at: float


class DriverBusy(ConcurrencyConflict):
    """Another process drives this execution: its driver lease is live."""

    code = "driver_busy"

    def __init__(self, lease: DriverLease) -> None:
        until = datetime.fromtimestamp(lease.expires_at, UTC).isoformat(timespec="seconds")
        super().__init__(
            f"execution {lease.execution_id} is driven by {lease.holder} until {until}",
            execution_id=str(lease.execution_id),
            holder=lease.holder,
            expires_at=lease.expires_at,
        )
        self.lease = lease


class DriverLeases(Protocol):
    def acquire_driver(
        self, execution_id: int, holder: str, now: float, ttl: float, *, replace: str | None = None
    ) -> DriverLease:
        """Take the driver lease of an execution until `now + ttl`, in one statement: free
        or expired -> taken; already `holder`'s -> renewed; held by `replace` (a holder the
        caller knows is dead) -> taken. Else raises DriverBusy naming the live holder."""
        ...

    def renew_driver(self, execution_id: int, holder: str, now: float, ttl: float) -> bool:
        """Extend `holder`'s lease to `now + ttl`; False when another process holds it (lost)."""
        ...

    def release_driver(self, execution_id: int, holder: str, now: float) -> bool:
        """End `holder`'s lease at `now` (the row stays: it records that an embedded process
        drove the run); False when `holder` did not hold it."""
        ...

    def get_driver(self, execution_id: int) -> DriverLease | None:
        """The lease as stored, live or not; None when no embedded process ever drove it."""
        ...
