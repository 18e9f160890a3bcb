"""Stalled runs (DSL 10.6, `executor.spec.stall_after`) and unbounded attempts, on the
engine service.

The store names the candidates (RUNNING runs with a stall window whose last event is older
than it: `stalled_executions`); what else moved them is read here (`progress`: their live
attempts' leases, their running children's progress, recursively); the decision is the
core's (`core.liveness.stall_verdict`, given `now`, that progress and who holds each open
command); the failure is an
`execution.stalled` (kind `stalled`) appended through the orchestrator with a
`command.failed` for each open command, so both modes end such a run alike and as a failed
step ends it: compensations, then `execution.failed`. The reconciler's tick calls this for every run (server), the embedded
engine's poll (a duty of its clock) for the runs it drives.

Also here: the engine's `default_timeout`, which bounds an attempt of a step without
`spec.timeout` however long it heartbeats (`fail_overdue`).
"""

from __future__ import annotations

import logging
from collections.abc import Container, Sequence
from typing import TYPE_CHECKING, Any

from milepost.core import events as ev
from milepost.core import liveness
from milepost.core import state as st
from milepost.playbook import model
from milepost.store import port

if TYPE_CHECKING:
    from milepost.engine.lifecycle import Lifecycle

log = logging.getLogger(__name__)


def fail_stalled(
    engine: Lifecycle, now: float, only: Container[int] | None = None
) -> tuple[list[int], int]:
    """Fail the runs (of `only`, when given) that made no progress for their stall window.
    Returns the runs failed and how many could not be checked (logged)."""
    failed: list[int] = []
    errors = 0
    for xid, last_at in engine.store.stalled_executions(now):
        if only is not None and xid not in only:
            continue
        try:
            if _fail_if_stalled(engine, xid, last_at, now):
                failed.append(xid)
        except Exception:
            errors += 1
            log.exception(
                "stall check of execution %s failed",
                xid,
                extra={"action": "stall_check_failed", "execution_id": xid},
            )
    return failed, errors


def progress(
    store: port.Store,
    xid: int,
    now: float,
    last_event_at: float,
    rows: Sequence[port.CommandRow] | None = None,
) -> float:
    """When the run last moved (`core.liveness.last_progress`): its last event, its live
    attempts (the command table's leases: heartbeats write no event), its running
    children's progress; the children are read only when nothing of its own moves it now.
    `rows`: its open commands, when the caller has read them."""
    if rows is None:
        rows = store.open_commands(xid)
    leases = [r.lease_expires_at for r in rows if r.status == port.COMMAND_CLAIMED]
    own = liveness.last_progress(now, last_event_at, leases)
    if own >= now:
        return own
    children = []
    for child in store.running_children(xid):
        at = store.last_event_at(child)
        if at is not None:  # its start is committed with its first event
            children.append(progress(store, child, now, at))
    return liveness.last_progress(now, own, (), children)


def _fail_if_stalled(engine: Lifecycle, xid: int, last_at: float, now: float) -> bool:
    with engine.locked([xid]):  # no report may slip in between the verdict and the failure
        rows = engine.store.open_commands(xid)
        holders = {r.command_id: r.worker_id for r in rows}
        # read again under the lock: a report may have come since the candidates' query
        last_at = max(last_at, engine.store.last_event_at(xid) or last_at)
        moved = progress(engine.store, xid, now, last_at, rows)

        def verdict(
            state: st.ExecutionState, playbook: model.Playbook
        ) -> tuple[dict[str, Any] | None, int | None]:
            # caused by the last event before the silence, as any execution event
            return liveness.stall_verdict(state, playbook, now, moved, holders), state.causes.last

        error, cause = engine.read(xid, verdict)
        if error is None:
            return False
        log.warning(
            "execution %s stalled: %s",
            xid,
            error["message"],
            extra={"action": "execution_stalled", "execution_id": xid},
        )
        # the run's failure first, then its open commands settled (what holds them will
        # never report): the run ends as a failed step ends it, compensations first
        events = [liveness.stalled(engine.new_id(), xid, error, now, cause)]
        settled = {"kind": liveness.STALLED, "message": error["message"], "retryable": False}
        events.extend(_command_failed(engine, row, settled, now) for row in rows)
        try:
            engine.process(events)
        except port.ClaimMoved:
            return False  # a claim, report or expiry came in meanwhile: the run moved
        return True


def _command_failed(
    engine: Lifecycle, row: port.CommandRow, error: dict[str, Any], now: float
) -> ev.Event:
    """The engine's `command.failed` of an open command nobody will report on."""
    return liveness.failed_event(
        row.execution_id,
        row.command_id,
        row.step,
        (row.run, row.index, row.attempt),
        row.epoch,
        row.worker_id,
        error,
        engine.new_id(),
        now,
    )


def fail_overdue(
    engine: Lifecycle,
    now: float,
    default_timeout: float,
    bounded: set[int],
    only: Container[int] | None = None,
) -> tuple[list[int], int]:
    """Fail, with kind `timeout`, each attempt of a step without `spec.timeout` claimed
    more than `default_timeout` ago (the engine's `default_timeout`), heartbeats or not:
    an attempt that heartbeats forever would hold its slot forever. The claim is settled,
    so its worker's next heartbeat is refused and its late report is stale. Returns the
    commands failed and how many could not be checked (logged). `bounded`: the commands
    found to have their own timeout, kept by the caller so they are read once."""
    failed: list[int] = []
    errors = 0
    rows = engine.store.overdue_claims(now, default_timeout)
    bounded &= {row.command_id for row in rows}
    for row in rows:
        if row.command_id in bounded or (only is not None and row.execution_id not in only):
            continue
        try:
            if _fail_if_unbounded(engine, row, default_timeout, now):
                failed.append(row.command_id)
            else:
                bounded.add(row.command_id)
        except port.ClaimMoved:
            continue  # its report (or an expiry) came first: nothing to fail
        except Exception:
            errors += 1
            log.exception(
                "timeout check of command %s failed",
                row.command_id,
                extra={"action": "timeout_check_failed", "execution_id": row.execution_id},
            )
    return failed, errors


def _fail_if_unbounded(
    engine: Lifecycle, row: port.CommandRow, default_timeout: float, now: float
) -> bool:
    xid = row.execution_id
    with engine.locked([xid]):

        def unbounded(state: st.ExecutionState, playbook: model.Playbook) -> bool:
            step = playbook.steps.get(row.step)
            # a step with its own timeout is bounded by its worker (kind `timeout` there)
            return (
                row.command_id in state.commands and step is not None and step.spec.timeout is None
            )

        if not engine.read(xid, unbounded):
            return False
        message = (
            f"step ran longer than the engine's default_timeout of "
            f"{default_timeout:g}s (it sets no spec.timeout)"
        )
        error = {"kind": "timeout", "message": message, "retryable": True}
        engine.process([_command_failed(engine, row, error, now)])
        return True
