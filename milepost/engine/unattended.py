"""A cancel nobody would act on: `milepost cancel` of a local run whose driver is gone
(its process died, or exited without finishing it) finishes the cancellation itself,
as the driver would have: queued commands settled, claimed ones abandoned, then
`execution.cancelled`. A run with a live driver is left to it (it notices the request
within a second), and so is a run a server drives (no driver lease at all)."""

from __future__ import annotations

from typing import Any

from milepost.core import cancellation
from milepost.core import state as st
from milepost.engine.drivers import driver_holder, holder_alive
from milepost.engine.errors import AlreadyTerminal
from milepost.engine.lifecycle import Lifecycle
from milepost.store.port import DriverBusy

FINISH_TTL = 30.0
"""The driver lease taken while finishing: a `resume` at the same time is refused."""


def driver_gone(engine: Lifecycle, execution_id: int) -> bool:
    """Whether nothing drives the run: its driver lease expired or was released, or names
    a process of this host that no longer exists. False for a server's run (no lease)."""
    lease = engine.store.get_driver(execution_id)
    if lease is None:
        return False
    return lease.expires_at <= engine.clock() or holder_alive(lease.holder) is False


def undriven(engine: Lifecycle, execution_id: int) -> dict[str, Any] | None:
    """A local run nothing drives, for its status: `{holder, commands, steps, message}`,
    its gone driver and the open commands that wait for one (not for a worker: an
    embedded run's commands are run by its driver's process, `engine.worker_pools`). None
    while a process drives it, or a server does."""
    if not driver_gone(engine, execution_id):
        return None
    lease = engine.store.get_driver(execution_id)
    assert lease is not None  # driver_gone is False without one
    rows = engine.store.open_commands(execution_id)
    return {
        "holder": lease.holder,
        "commands": len(rows),
        "steps": sorted({row.step for row in rows}),
        "message": "no process drives this run",
    }


def finish(
    engine: Lifecycle, execution_id: int, actor: str | None, cause: str | None = None
) -> list[int]:
    """Cancel the run and its children to the end, holding each one's driver lease while
    it writes. Returns the executions it ended; one another process took over meanwhile
    (DriverBusy) is left to it. AlreadyTerminal when `execution_id` had ended."""
    ended: list[int] = []
    lease = engine.store.get_driver(execution_id)
    dead = lease.holder if lease is not None and holder_alive(lease.holder) is False else None
    holder = driver_holder()
    try:
        engine.store.acquire_driver(execution_id, holder, engine.clock(), FINISH_TTL, replace=dead)
    except DriverBusy:
        return ended
    try:
        try:
            engine.cancel(execution_id, actor, cause)  # the request, queued work settled
        except AlreadyTerminal:
            if cause is None:
                raise  # the run asked about ended before: nothing to cancel
            return ended  # a child that ended meanwhile
        engine.abandon_overdue([execution_id], now=True)
        if engine.read(execution_id, lambda state, _: state.status) == st.CANCELLED:
            ended.append(execution_id)
    finally:
        engine.store.release_driver(execution_id, holder, engine.clock())
    for child in engine.store.running_children(execution_id):
        ended += finish(engine, child, actor, cancellation.child_cause(execution_id))
    return ended
