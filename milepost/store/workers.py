"""The workers registry (table `worker`): one row per worker process, written when it
checks in (its machine-id lease and each renewal, `engine.workers`) and read by the
operators' list and by the pools' liveness.

A row's status is not stored: the engine decides it at read time from `last_seen` and the
row's own `ttl` (a worker is lost once it has not been seen for its ttl). `lost_at` only
records when the reconciler first noticed, so that it says so once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from milepost.errors import MilepostError

WORKER_COLS = (
    "worker_key, name, pool, kind, host, pid, version, started_at, last_seen, ttl, lost_at, owner"
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
    owner: str | None = None
    """The token it checked in with (its hash); None: a process on the database (the
    embedded engine's in-process workers). While the row is live, its name and key are
    that token's (`WorkerNameTaken`)."""

    def live(self, now: float) -> bool:
        return self.last_seen + self.ttl > now


class WorkerNameTaken(MilepostError):
    """A live worker of another token already checks in under this name (or process key):
    a worker's name is bound to the token that registered it while it is live."""

    code = "worker_name_taken"


def check_bound(row: WorkerRow, held: Iterable[WorkerRow]) -> None:
    """WorkerNameTaken unless every live row of `row`'s name or key (`held`, as stored) is
    of `row`'s owner: nobody checks in as a live worker of another token, which would
    change its row (its ttl, its pool) or list a lost twin under its name. A process on
    the database itself (`row.owner` None: the embedded engine) is never refused: it holds
    the database, and a token must not keep `milepost run` from starting."""
    if row.owner is None:
        return
    for other in held:
        if (other.owner or "") != (row.owner or "") and other.live(row.last_seen):
            what = "name" if other.name == row.name else "process key"
            raise WorkerNameTaken(
                f"worker {what} {row.name if what == 'name' else row.worker_key!r} is held by "
                "a live worker of another token: choose another MILEPOST_WORKER_ID, or wait "
                f"until that worker is lost (seen {other.ttl:g} s ago at most)",
                name=row.name,
                worker_key=other.worker_key,
                owner=other.owner,
            )


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
            None if owner is None else str(owner),
        )
        for k, n, p, kind, h, pid, v, s, seen, ttl, lost, owner in rows
    ]


class Workers(Protocol):
    """The registry part of the store port (`port.Store`)."""

    def record_worker(self, row: WorkerRow) -> WorkerRow:
        """Insert or update the row of `row.worker_key`: everything but `started_at`,
        which the first check-in set; `lost_at` cleared. Returns the row as stored.
        WorkerNameTaken when a live row of its name or key is another owner's
        (`check_bound`), checked in the write's transaction."""
        ...

    def list_workers(self) -> list[WorkerRow]:
        """Every row, by name then key."""
        ...

    def mark_lost_workers(self, now: float) -> list[WorkerRow]:
        """Set `lost_at = now` on the rows not seen for their ttl and not marked yet;
        returns them as they were before (for the log line)."""
        ...

    def forget_workers(
        self,
        *,
        worker_key: str | None = None,
        seen_before: float | None = None,
        owner: str | None = None,
    ) -> int:
        """Delete the row of `worker_key` (a clean exit; only `owner`'s), or the rows last
        seen before `seen_before` (lost long ago); returns how many."""
        ...
