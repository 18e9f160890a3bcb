"""Which pools have a live worker, and the queued commands of the pools that have none.

A pool has a live worker while a `milepost worker` serving it is live in the workers
registry (`engine.workers`: it checks in with its machine-id lease and each renewal, and
is lost once it has not for its ttl). A command queued in a pool no live worker serves
would wait silently; `missing` names it for the status reads and `/metrics`
(`milepost_commands_without_worker{pool}`).

An execution driven by an embedded engine (`milepost run`, a driver lease) is run by
that process's in-process workers, which take every pool: its commands are never missing
a worker. Once that driver is gone they wait for a driver, not a worker (`milepost
resume`; `engine.unattended.undriven` says so).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from milepost.engine import workers
from milepost.playbook import pools
from milepost.store import port

_DEFAULT_PREFIX = "worker:"
"""The holder of a default-pool worker, as it was before pools: `worker:<worker id>`."""
_POOL_PREFIX = "worker@"
"""The holder of a worker of another pool: `worker@<pool>:<worker id>`."""


def holder(worker_id: str, pool: str) -> str:
    """The machine-id lease holder of a worker serving `pool` (for people reading
    `machine_lease`)."""
    if pool == pools.DEFAULT:
        return f"{_DEFAULT_PREFIX}{worker_id}"
    return f"{_POOL_PREFIX}{pool}:{worker_id}"


@dataclass(slots=True)
class Missing:
    """The queued commands of one pool that no live worker serves."""

    pool: str
    commands: int = 0
    steps: set[str] = field(default_factory=set)

    @property
    def message(self) -> str:
        return f"no live worker of pool {self.pool}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "commands": self.commands,
            "steps": sorted(self.steps),
            "message": self.message,
        }


def missing(store: port.Store, now: float, execution_id: int | None = None) -> list[Missing]:
    """The pools with queued commands (of `execution_id`, else of every run) and no live
    worker, sorted by pool; commands of the runs of an embedded engine are left out."""
    queued = [row for row in store.open_commands(execution_id) if row.status == port.COMMAND_QUEUED]
    if not queued:
        return []
    live = workers.live_pools(store, now)
    unserved = [row for row in queued if row.pool not in live]
    driven = _embedded({row.execution_id for row in unserved}, store)
    by_pool: dict[str, Missing] = {}
    for row in unserved:
        if row.execution_id in driven:
            continue
        entry = by_pool.setdefault(row.pool, Missing(row.pool))
        entry.commands += 1
        entry.steps.add(row.step)
    return [by_pool[p] for p in sorted(by_pool)]


def _embedded(execution_ids: set[int], store: port.Store) -> set[int]:
    """The executions an embedded engine drives or drove (a driver lease, live or not):
    its in-process workers run every pool, and no `milepost worker` would help one whose
    driver is gone."""
    return {xid for xid in execution_ids if store.get_driver(xid) is not None}


def counts(found: Iterable[Missing]) -> dict[str, int]:
    """pool -> queued commands without a worker (the metric's samples)."""
    return {m.pool: m.commands for m in found}
