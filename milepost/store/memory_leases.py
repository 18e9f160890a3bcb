"""The in-memory store's workers registry and driver leases (`store.memory.MemoryStore`
inherits them), kept apart so that the store itself stays readable."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from milepost.store import port

if TYPE_CHECKING:
    from milepost.store.memory import MemoryDatabase


class MemoryLeases:
    db: MemoryDatabase

    # -- the workers registry --------------------------------------------------------------

    def record_worker(self, row: port.WorkerRow) -> port.WorkerRow:
        with self.db.lock:
            held = self.db.workers.get(row.worker_key)
            port.check_bound(
                row, [r for r in self.db.workers.values() if r.name == row.name or r is held]
            )
            started = row.started_at if held is None else held.started_at
            stored = dataclasses.replace(row, started_at=started, lost_at=None)
            self.db.workers[row.worker_key] = stored
            return stored

    def list_workers(self) -> list[port.WorkerRow]:
        with self.db.lock:
            return sorted(self.db.workers.values(), key=lambda r: (r.name, r.worker_key))

    def mark_lost_workers(self, now: float) -> list[port.WorkerRow]:
        with self.db.lock:
            lost = [
                r for r in self.list_workers() if r.lost_at is None and r.last_seen + r.ttl <= now
            ]
            for row in lost:
                self.db.workers[row.worker_key] = dataclasses.replace(row, lost_at=now)
            return lost

    def forget_workers(
        self,
        *,
        worker_key: str | None = None,
        seen_before: float | None = None,
        owner: str | None = None,
    ) -> int:
        with self.db.lock:
            gone = [
                k
                for k, r in self.db.workers.items()
                if (k == worker_key and (r.owner or "") == (owner or ""))
                or (seen_before is not None and r.last_seen < seen_before)
            ]
            for key in gone:
                del self.db.workers[key]
            return len(gone)

    def acquire_driver(
        self, execution_id: int, holder: str, now: float, ttl: float, *, replace: str | None = None
    ) -> port.DriverLease:
        with self.db.lock:
            held = self.db.drivers.get(execution_id)
            if held is not None and held.holder not in (holder, replace) and held.expires_at > now:
                raise port.DriverBusy(held)
            lease = self.db.drivers[execution_id] = port.DriverLease(
                execution_id, holder, now + ttl
            )
            return lease

    def renew_driver(self, execution_id: int, holder: str, now: float, ttl: float) -> bool:
        with self.db.lock:
            held = self.db.drivers.get(execution_id)
            if held is None or held.holder != holder:
                return False
            self.db.drivers[execution_id] = dataclasses.replace(held, expires_at=now + ttl)
            return True

    def release_driver(self, execution_id: int, holder: str, now: float) -> bool:
        with self.db.lock:
            held = self.db.drivers.get(execution_id)
            if held is None or held.holder != holder:
                return False
            self.db.drivers[execution_id] = dataclasses.replace(
                held, expires_at=min(held.expires_at, now)
            )
            return True

    def get_driver(self, execution_id: int) -> port.DriverLease | None:
        return self.db.drivers.get(execution_id)
