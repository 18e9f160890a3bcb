"""The projections of the log as a pure function of events: events in, row changes out.

The `execution` rows (the list view), the `command` rows (the claim queue) and the
`approval` rows (`store.approvals`) are derived from the log and nothing else, so every
store computes their changes here and only applies them: the SQL stores with one
statement per kind of change, in the order of the fields of `Changes`, the in-memory
store and `rebuild` with `apply`. No I/O here.

Claims are events too (`command.claimed`, `command.released`, written by the store in the
transaction that takes or gives back the claim), so the command table can be rebuilt from
the log (`rebuild`). One column is not in the log: a heartbeat moves `lease_expires_at`
of a live claim in the projection only (a heartbeat comes every lease/3 per command; an
event each would triple the log of a long task). `rebuild` gives the claim's lease end.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from milepost.core import claims
from milepost.core import events as ev
from milepost.core import final_step_state as fs
from milepost.store import approvals as ap
from milepost.store import port
from milepost.store import usage as used

RUNNING = "RUNNING"
"""The status of a run's row from its start to its end."""
ENDED_STATUS = {
    ev.EXECUTION_COMPLETED: "COMPLETED",
    ev.EXECUTION_FAILED: "FAILED",
    ev.EXECUTION_CANCELLED: "CANCELLED",
}
_TOUCH_APPROVALS = frozenset(
    {
        ev.APPROVAL_REQUESTED,
        ev.APPROVAL_DECIDED,
        *ap.CLOSING,
        ev.STEP_EXIT,
        *ev.TERMINAL_EXECUTION_EVENTS,
    }
)
_NO_ROWS = frozenset(
    {
        ev.STEP_ENTER,
        ev.LOOP_DONE,
        ev.COMMAND_STARTED,
        ev.COMMAND_HEARTBEAT,
    }
)
"""Frequent event types that change no row (`changes` passes over them at once; a type
left out of this set only costs the walk through the cases)."""


@dataclass(slots=True)
class Changes:
    """The row changes of a batch of stored events, as statement parameters (one Python type
    per column, in the column order of the statements that apply them)."""

    started: list[tuple[int, str, int | None, str, int | None, float, float, str | None]] = field(
        default_factory=list
    )
    """execution_id, path, version, status, parent_execution_id, created_at, updated_at,
    started_by: inserted unless the execution has a row."""
    cancels: list[int] = field(default_factory=list)
    """Executions whose cancel was requested."""
    finishing: list[int] = field(default_factory=list)
    """Executions that started their final steps, their status settled: compensating
    (DSL 10.5) or tearing down (`core.final_step_state`). Their claims are taken again, applied after `cancels` (only their final steps
    are issued from then on, and a cancel asked while they run does not stop them)."""
    issued: list[tuple[int, int, str, int, int, int, str, str, str, float, float]] = field(
        default_factory=list
    )
    """command_id, execution_id, step, run, idx, attempt, idempotency_key, status, pool,
    created_at, updated_at: new queued commands."""
    settled: list[tuple[str, float, int]] = field(default_factory=list)
    """status, updated_at, command_id: a worker's report settled the command."""
    expired: list[tuple[float, int, int | None]] = field(default_factory=list)
    """updated_at, command_id, epoch: the claim of that epoch (any when None) lapsed, the
    command failed; a newer claim is left alone."""
    claimed: list[tuple[int, str, int, float, float]] = field(default_factory=list)
    """command_id, worker_id, epoch, lease_expires_at, updated_at. The SQL stores take the
    claim with the statement that writes the event, so they skip these and `released`."""
    released: list[tuple[int, str, int, float]] = field(default_factory=list)
    """command_id, worker_id, epoch, updated_at: queued again."""
    ended: list[tuple[str, str | None, float, int]] = field(default_factory=list)
    """status, error (JSON), updated_at, execution_id: the run ended, and its commands
    still queued or claimed are cancelled (applied last: after the batch's commands)."""
    approvals: list[ap.Op] = field(default_factory=list)
    """The approval rows' changes, in the order of their events (applied after `started`,
    whose path a new approval row shows)."""
    usage: list[used.Op] = field(default_factory=list)
    """What the batch's reports add to `execution_usage` (`store.usage`)."""
    leases: list[tuple[float, int]] = field(default_factory=list)
    """lease_s, command_id: a new command's own lease (`spec.liveness`; applied after
    `issued`). Only commands of steps that set one."""
    stalls: list[tuple[float, int]] = field(default_factory=list)
    """stall_after, execution_id: a new run's stall window (applied after `started`)."""
    restarts: list[tuple[int, int]] = field(default_factory=list)
    """restarted_from, execution_id: the run a new run restarts (applied after `started`)."""
    progressed: list[tuple[float, int, float]] = field(default_factory=list)
    """updated_at, execution_id, updated_at: a step of the running run exited, one of its
    approvals opened, took a vote or closed, or a retry began or ended its wait (the last of
    those in the batch), so its row moves up the change stream: the runs page sees its progress, the approvals page that
    an approval changed (every approval change is one of these or the run's end). Applied
    after `started`; never back, nor on an ended run, whose updated_at is its end."""

    @property
    def empty(self) -> bool:
        return not (
            self.started
            or self.cancels
            or self.finishing
            or self.issued
            or self.settled
            or self.expired
            or self.claimed
            or self.released
            or self.ended
            or self.approvals
            or self.usage
            or self.leases
            or self.stalls
            or self.restarts
            or self.progressed
        )


def _starts_or_ends_a_retry(event: ev.Event) -> bool:
    """A retry timer set (`spec.retry`'s, or a task policy's: a `call.error` naming its
    retry) or its attempt issued: what the run waits on (`core.waiting`) changed, and the
    runs list shows it."""
    t, p = event.event_type, event.payload
    return (
        t == ev.COMMAND_RETRY_SCHEDULED
        or (t == ev.CALL_ERROR and "retry" in p)
        or (t == ev.COMMAND_ISSUED and int(p.get("attempt", 1)) > 1)
    )


def changes(events: Iterable[ev.Event]) -> Changes:
    """The projection changes of stored events. A stale report (`meta.stale`, fenced by
    the server) changes nothing."""
    out = Changes()
    moved: dict[int, float] = {}
    for event in events:
        t = event.event_type
        if t in _NO_ROWS or event.meta.get("stale"):
            continue  # a step.enter, a loop's events, a stale report: no row changes
        p = event.payload
        at = float(event.created_at)
        if t in _TOUCH_APPROVALS:
            out.approvals.extend(ap.ops(event))
        if t == ev.STEP_EXIT or t in ev.APPROVAL_EVENTS or _starts_or_ends_a_retry(event):
            moved[event.execution_id] = max(at, moved.get(event.execution_id, at))
        if t == ev.COMMAND_ISSUED:
            out.issued.append(
                (
                    int(p["command_id"]),
                    event.execution_id,
                    str(event.step),
                    int(p["run"]),
                    int(p.get("index", -1)),
                    int(p.get("attempt", 1)),
                    str(p.get("idempotency_key", "")),
                    port.COMMAND_QUEUED,
                    str(p.get("pool") or "default"),
                    at,
                    at,
                )
            )
            if p.get("lease_s") is not None:
                out.leases.append((float(p["lease_s"]), int(p["command_id"])))
        elif t in ev.SETTLING_REPORTS:
            status = port.COMMAND_COMPLETED if t == ev.COMMAND_COMPLETED else port.COMMAND_FAILED
            out.settled.append((status, at, int(p["command_id"])))
            out.usage.extend(used.ops(event))
        elif t == ev.COMMAND_LEASE_EXPIRED:
            epoch = p.get("epoch", event.meta.get("epoch"))
            out.expired.append((at, int(p["command_id"]), None if epoch is None else int(epoch)))
        elif t == ev.COMMAND_CLAIMED:
            out.claimed.append(
                (
                    int(p["command_id"]),
                    str(p["worker_id"]),
                    int(p["epoch"]),
                    float(p["lease_expires_at"]),
                    at,
                )
            )
        elif t == ev.COMMAND_RELEASED:
            out.released.append((int(p["command_id"]), str(p["worker_id"]), int(p["epoch"]), at))
        elif t == ev.EXECUTION_STARTED:
            parent = p.get("parent_execution_id")
            version = p.get("version")
            out.started.append(
                (
                    event.execution_id,
                    str(p.get("path", "")),
                    None if version is None else int(version),
                    RUNNING,
                    None if parent is None else int(parent),
                    at,
                    at,
                    _text(p.get("started_by")),
                )
            )
            if p.get("stall_after") is not None:
                out.stalls.append((float(p["stall_after"]), event.execution_id))
            if p.get("restarted_from"):
                out.restarts.append((int(p["restarted_from"]), event.execution_id))
        elif t == ev.EXECUTION_CANCEL_REQUESTED and not fs.stops_nothing(event):
            out.cancels.append(event.execution_id)
        elif t in (ev.COMPENSATION_STARTED, ev.TEARDOWN_STARTED):
            out.finishing.append(event.execution_id)
        elif t in ev.TERMINAL_EXECUTION_EVENTS:
            error = p.get("error")
            out.ended.append(
                (ENDED_STATUS[t], json.dumps(error) if error else None, at, event.execution_id)
            )
    out.progressed = [(at, xid, at) for xid, at in moved.items()]
    return out


def claimed_event(
    event_id: int,
    row: port.CommandRow,
    worker_id: str,
    epoch: int,
    expires_at: float,
    now: float,
    seq: int = 0,
) -> ev.Event:
    """The `command.claimed` event of a claim the store takes (`seq`: numbered already),
    caused by the command it claims (`core.claims.claimed`)."""
    return claims.claimed(
        event_id,
        row.execution_id,
        row.command_id,
        row.step,
        (row.run, row.index, row.attempt),
        worker_id,
        epoch,
        expires_at,
        now,
        seq,
    )


def released_event(
    event_id: int, row: port.CommandRow, worker_id: str, epoch: int, now: float
) -> ev.Event:
    """The `command.released` event of a claim given back (`row` as it was claimed)."""
    return claims.released(
        event_id,
        row.execution_id,
        row.command_id,
        row.step,
        (row.run, row.index, row.attempt),
        worker_id,
        epoch,
        now,
    )


_OPEN = (port.COMMAND_QUEUED, port.COMMAND_CLAIMED)


def apply(
    change: Changes,
    executions: dict[int, port.ExecutionRow],
    commands: dict[int, port.CommandRow],
    approval_rows: dict[int, ap.ApprovalRow] | None = None,
    usage_rows: dict[used.Key, list[float]] | None = None,
) -> None:
    """Apply `change` to rows held in memory, as the SQL stores' statements do."""
    if change.usage and usage_rows is not None:
        used.apply(change.usage, usage_rows)
    for xid, path, version, status, parent, created, updated, by in change.started:
        if xid not in executions:
            executions[xid] = port.ExecutionRow(
                xid, path, version, status, created, updated, parent, started_by=by
            )
    for updated, xid, _ in change.progressed:
        moved = executions.get(xid)
        if moved is not None and moved.status == RUNNING and moved.updated_at < updated:
            executions[xid] = dataclasses.replace(moved, updated_at=updated)
    if change.approvals and approval_rows is not None:
        paths = {
            x: executions[x].path
            for x in {r.row.execution_id for r in change.approvals if isinstance(r, ap.Requested)}
            if x in executions
        }
        ap.apply(change.approvals, approval_rows, paths)
    for xid in change.cancels:
        if xid in executions:
            executions[xid] = dataclasses.replace(executions[xid], cancel_requested=True)
    for xid in change.finishing:
        if xid in executions:
            executions[xid] = dataclasses.replace(executions[xid], cancel_requested=False)
    for cid, xid, step, run, idx, attempt, key, status, pool, created, _ in change.issued:
        commands[cid] = port.CommandRow(
            cid, xid, step, run, idx, attempt, key, status, None, 0, None, created, pool
        )
    for status, _, cid in change.settled:
        if cid in commands:
            commands[cid] = dataclasses.replace(commands[cid], status=status)
    for _, cid, epoch in change.expired:
        row = commands.get(cid)
        if row is not None and row.status == port.COMMAND_CLAIMED and epoch in (None, row.epoch):
            commands[cid] = dataclasses.replace(row, status=port.COMMAND_FAILED)
    for cid, worker, epoch, expires, _ in change.claimed:
        if cid in commands:
            commands[cid] = dataclasses.replace(
                commands[cid],
                status=port.COMMAND_CLAIMED,
                worker_id=worker,
                epoch=epoch,
                lease_expires_at=expires,
            )
    for cid, _, _, _ in change.released:
        if cid in commands:
            commands[cid] = dataclasses.replace(
                commands[cid], status=port.COMMAND_QUEUED, worker_id=None, lease_expires_at=None
            )
    for status, error, updated, xid in change.ended:
        if xid in executions:
            executions[xid] = dataclasses.replace(
                executions[xid],
                status=status,
                updated_at=updated,
                error=json.loads(error) if error else None,
            )
        for cid, row in list(commands.items()):
            if row.execution_id == xid and row.status in _OPEN:
                commands[cid] = dataclasses.replace(row, status=port.COMMAND_CANCELLED)


@dataclass(slots=True)
class Rebuilt:
    """The projections of a log, rebuilt (`rebuild`)."""

    executions: dict[int, port.ExecutionRow] = field(default_factory=dict)
    commands: dict[int, port.CommandRow] = field(default_factory=dict)
    approvals: dict[int, ap.ApprovalRow] = field(default_factory=dict)


def rebuild(log: Sequence[ev.Event]) -> Rebuilt:
    """The command and approval projections of `log` (one or more executions' events, each
    execution's in seq order), event by event. `lease_expires_at` of a claimed command is
    the lease end its `command.claimed` event gave: a heartbeat moved it in the stored row
    only."""
    out = Rebuilt()
    for event in log:
        apply(changes([event]), out.executions, out.commands, out.approvals)
    return out


def _text(value: object) -> str | None:
    return None if value is None else str(value)
