"""The workers registry (table `worker`): one row per worker process, written when it
checks in (its machine-id lease and each renewal, `engine.workers`) and read by the
operators' list and by the pools' liveness.

A row's status is not stored: the engine decides it at read time from `last_seen` and the
row's own `ttl` (a worker is lost once it has not been seen for its ttl). `lost_at` only
records when the reconciler first noticed, so that it says so once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

WORKER_COLS = (
    "worker_key, name, pool, kind, host, pid, version, started_at, last_seen, ttl, lost_at"
)
"""The `worker` columns of a `WorkerRow`, in its order."""


@dataclass(frozen=True, slots=True)
class WorkerRow:
    worker_key: str
    """The process: unique per worker process (a name may be shared or reused)."""
    name: str
    """The worker id its claims carry (`command.worker_id`)."""
    pool: str
    kind: str
    """`worker` (a `milepost worker` process) or `embedded` (in-process workers)."""
    host: str
    pid: int | None
    version: str
    started_at: float
    """When the registry first saw this process."""
    last_seen: float
    ttl: float
    """Seconds without a check-in after which the worker is lost."""
    lost_at: float | None = None
    """When the reconciler noticed it lost; None while live (a check-in clears it)."""

    def live(self, now: float) -> bool:
        return self.last_seen + self.ttl > now


def decode(rows: Sequence[Sequence[Any]]) -> list[WorkerRow]:
    """SQL rows of `WORKER_COLS`."""
    return [
        WorkerRow(
            str(k),
            str(n),
            str(p),
            str(kind),
            str(h),
            None if pid is None else int(pid),
            str(v),
            float(s),
            float(seen),
            float(ttl),
            None if lost is None else float(lost),
        )
        for k, n, p, kind, h, pid, v, s, seen, ttl, lost in rows
    ]


class Workers(Protocol):
    """The registry part of the store port (`port.Store`)."""

    def record_worker(self, row: WorkerRow) -> WorkerRow:
        """Insert or update the row of `row.worker_key`: everything but `started_at`,
        which the first check-in set; `lost_at` cleared. Returns the row as stored."""
        ...

    def list_workers(self) -> list[WorkerRow]:
        """Every row, by name then key."""
        ...

    def mark_lost_workers(self, now: float) -> list[WorkerRow]:
        """Set `lost_at = now` on the rows not seen for their ttl and not marked yet;
        returns them as they were before (for the log line)."""
        ...

    def forget_workers(
        self, *, worker_key: str | None = None, seen_before: float | None = None
    ) -> int:
        """Delete the row of `worker_key` (a clean exit), or the rows last seen before
        `seen_before` (lost long ago); returns how many."""
        ...
