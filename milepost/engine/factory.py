"""One engine, one factory: every transport gets its engine service here.

The server (`api/app.py`, and `milepost ui` through it), the embedded engine (`milepost
run`, `resume`, `conformance`, `bench`), the commands that write a few events to a local
database and exit (`cancel`, `approve`, an operator's action) and the ones that only read
(`list`, `status`, `describe`, `register`, `doctor`) all call `build_engine`: the
machine-id lease, the orchestrator and the service are made the same way for each, and
what differs between them is a parameter of this call, never a construction of its own
(`tests/unit/test_engine_factory.py` fails on a `Lifecycle(`, `Orchestrator(` or
`LeasedIds(` elsewhere in `milepost/`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from milepost.engine.clock import Clock
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.machine import LEASE_TTL_S, LeasedIds, holder_name
from milepost.engine.meters import Meters
from milepost.engine.orchestrator import Orchestrator, Outcome
from milepost.settings import Settings
from milepost.store.port import Store


@dataclass(frozen=True, slots=True)
class Lease:
    """The engine makes event ids on a machine id leased from the store (`engine.machine`),
    so that no other process on the database makes the same ids: `settings.machine_id`
    when it is set (leased when free, minted on whatever the lease), else any free one.
    `kind` names the holder in `machine_lease` (`server`, `embedded`, `cancel`, ...)."""

    kind: str
    ttl: float = LEASE_TTL_S
    """A short one for a command that exits in seconds: its id is free again soon."""


def given(**fields: Any) -> Settings:
    """Settings of these fields and the defaults, the environment left unread: what a
    caller with arguments of its own rather than a `Settings` hands the factory (the
    embedded engine's keyword arguments; a read with no engine-wide setting). A
    `secret_key` left None is read from `MILEPOST_SECRET_KEY` when a sealed workload is
    opened (`engine.seal`)."""
    return Settings.model_construct(**fields)


def build_engine(
    store: Store,
    settings: Settings,
    *,
    clock: Callable[[], float] = time.time,
    lease: Lease | None = None,
    shared: bool = False,
    exclusive: bool = False,
    meters: Meters | None = None,
    listeners: Iterable[Callable[[Outcome], None]] = (),
) -> Lifecycle:
    """The engine service over `store`.

    `lease`: how it makes event ids (None: a reader, on machine id 0, leasing nothing:
    it writes no event, or only ones a process with a lease would not make, a catalog
    entry); the lease is the engine's `machine_ids`, renewed (`machine.renew_forever`) and
    given back (`LeasedIds.release`) by its caller. `shared`: other servers append to the
    same runs (PostgreSQL): the orchestrator re-reads the log before it decides.
    `exclusive`: the only writer of the runs it drives, called from one thread (the
    embedded engine): no locks. `meters`: the counts a metrics endpoint reads (and the
    listeners that feed them). `listeners`: observers of every outcome, after the
    engine's own (a webhook). `settings`: `machine_id`, `secret_key`,
    `requeue_notice_after`, `default_timeout`; `clock`: the engine's time, read by the
    orchestrator, the machine-id lease and the engine's clock (`engine.clock`: its timers
    and the transport's duties), stepped by tests.
    """
    leased = (
        None
        if lease is None
        else LeasedIds(
            store,
            clock,
            holder=holder_name(lease.kind),
            ttl=lease.ttl,
            want=settings.machine_id,
        )
    )
    try:
        # told which machine id (MILEPOST_MACHINE_ID), the ids are minted on that one
        # whether its lease was had or not; a reader mints on 0
        fixed = settings.machine_id if leased is not None else 0
        orchestrator = Orchestrator(
            store,
            clock=clock,
            machine_id=fixed or 0,
            new_id=leased if fixed is None else None,
            shared=shared,
            secret_key=settings.secret_key,
        )
        engine = Lifecycle(
            store,
            orchestrator,
            meters=meters,
            requeue_after=settings.requeue_notice_after,
            exclusive=exclusive,
            default_timeout=settings.default_timeout,
            machine_ids=leased,
            timers=Clock(clock),
        )
        engine.listeners.extend(listeners)
    except BaseException:
        if leased is not None:  # else the id stays taken for its ttl
            leased.release()
        raise
    return engine
