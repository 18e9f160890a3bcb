"""Events: the immutable facts a run is made of, and their wire envelope.

An event is `{event_id, execution_id, parent_event_id, event_type, step, status,
payload, meta, worker_id, created_at}`. On the wire (NoETL's shape) `payload` travels
as `result = {status, context: payload}`, or `{status, reference: {...}}` when the
payload lives in the result store.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import field
from typing import Any

from milepost.records import record

EXECUTION_STARTED = "execution.started"
STEP_ENTER = "step.enter"
COMMAND_ISSUED = "command.issued"
COMMAND_CLAIMED = "command.claimed"
COMMAND_RELEASED = "command.released"
COMMAND_STARTED = "command.started"
COMMAND_HEARTBEAT = "command.heartbeat"
CALL_DONE = "call.done"
CALL_ERROR = "call.error"
STEP_EXIT = "step.exit"
COMMAND_COMPLETED = "command.completed"
COMMAND_FAILED = "command.failed"
COMMAND_RETRY_SCHEDULED = "command.retry_scheduled"
COMMAND_LEASE_EXPIRED = "command.lease_expired"
LOOP_DONE = "loop.done"
APPROVAL_REQUESTED = "approval.requested"
APPROVAL_DECIDED = "approval.decided"
APPROVAL_GRANTED = "approval.granted"
APPROVAL_DENIED = "approval.denied"
APPROVAL_EXPIRED = "approval.expired"
APPROVAL_INVALIDATED = "approval.invalidated"
EXECUTION_CANCEL_REQUESTED = "execution.cancel_requested"
EXECUTION_CANCELLED = "execution.cancelled"
COMPENSATION_STARTED = "compensation.started"
COMPENSATION_COMPLETED = "compensation.completed"
COMPENSATION_FAILED = "compensation.failed"
TEARDOWN_STARTED = "teardown.started"
TEARDOWN_COMPLETED = "teardown.completed"
TEARDOWN_FAILED = "teardown.failed"
BUDGET_EXCEEDED = "budget.exceeded"
EXECUTION_STALLED = "execution.stalled"
EXECUTION_COMPLETED = "execution.completed"
EXECUTION_FAILED = "execution.failed"
STEP_RETRY_REQUESTED = "step.retry_requested"
STEP_SKIP_REQUESTED = "step.skip_requested"
STEP_REUSED = "step.reused"

EVENT_TYPES = frozenset(
    {
        EXECUTION_STARTED,
        STEP_ENTER,
        COMMAND_ISSUED,
        COMMAND_CLAIMED,
        COMMAND_RELEASED,
        COMMAND_STARTED,
        COMMAND_HEARTBEAT,
        CALL_DONE,
        CALL_ERROR,
        STEP_EXIT,
        COMMAND_COMPLETED,
        COMMAND_FAILED,
        COMMAND_RETRY_SCHEDULED,
        COMMAND_LEASE_EXPIRED,
        LOOP_DONE,
        APPROVAL_REQUESTED,
        APPROVAL_DECIDED,
        APPROVAL_GRANTED,
        APPROVAL_DENIED,
        APPROVAL_EXPIRED,
        APPROVAL_INVALIDATED,
        EXECUTION_CANCEL_REQUESTED,
        EXECUTION_CANCELLED,
        COMPENSATION_STARTED,
        COMPENSATION_COMPLETED,
        COMPENSATION_FAILED,
        TEARDOWN_STARTED,
        TEARDOWN_COMPLETED,
        TEARDOWN_FAILED,
        EXECUTION_COMPLETED,
        EXECUTION_FAILED,
        BUDGET_EXCEEDED,
        EXECUTION_STALLED,
        STEP_RETRY_REQUESTED,
        STEP_SKIP_REQUESTED,
        STEP_REUSED,
    }
)

ALIASES = {
    "playbook.completed": EXECUTION_COMPLETED,
    "playbook.failed": EXECUTION_FAILED,
    "playbook.initialized": EXECUTION_STARTED,
}

TERMINAL_EXECUTION_EVENTS = frozenset({EXECUTION_COMPLETED, EXECUTION_FAILED, EXECUTION_CANCELLED})
REPORTS = frozenset({COMMAND_COMPLETED, COMMAND_FAILED, CALL_DONE, CALL_ERROR})
"""A worker's reports for a command: they carry `context.command_id` and the epoch of its
claim, and are fenced (`engine.fence`)."""
SETTLING_REPORTS = frozenset({COMMAND_COMPLETED, COMMAND_FAILED})
"""A worker's reports that settle their command (a projection, a fence, a stale mark)."""
APPROVAL_EVENTS = frozenset(
    {
        APPROVAL_REQUESTED,
        APPROVAL_DECIDED,
        APPROVAL_GRANTED,
        APPROVAL_DENIED,
        APPROVAL_EXPIRED,
        APPROVAL_INVALIDATED,
    }
)
"""Written by the engine only: a vote goes through the engine's checks (who may decide,
once per identity, not on a closed approval), never through the event routes."""
CLAIM_EVENTS = frozenset({COMMAND_CLAIMED, COMMAND_RELEASED})
"""Written by the store in the transaction that takes or gives back a claim: they record
who held a command with which epoch (the command projection is rebuilt from them) and
change no decision, so they never move an orchestrator's `expect` nor wake it."""

# Statuses an event carries when its producer gave none (NoETL derives them from the name).
_DEFAULT_STATUS = {
    EXECUTION_STARTED: "RUNNING",
    STEP_ENTER: "RUNNING",
    COMMAND_ISSUED: "PENDING",
    COMMAND_CLAIMED: "RUNNING",
    COMMAND_RELEASED: "PENDING",
    COMMAND_STARTED: "RUNNING",
    COMMAND_HEARTBEAT: "RUNNING",
    CALL_DONE: "COMPLETED",
    CALL_ERROR: "FAILED",
    STEP_EXIT: "COMPLETED",
    COMMAND_COMPLETED: "COMPLETED",
    COMMAND_FAILED: "FAILED",
    COMMAND_RETRY_SCHEDULED: "PENDING",
    COMMAND_LEASE_EXPIRED: "FAILED",
    LOOP_DONE: "COMPLETED",
    APPROVAL_REQUESTED: "PENDING",
    APPROVAL_GRANTED: "COMPLETED",
    APPROVAL_DENIED: "FAILED",
    APPROVAL_EXPIRED: "FAILED",
    APPROVAL_INVALIDATED: "FAILED",
    EXECUTION_CANCEL_REQUESTED: "RUNNING",
    EXECUTION_CANCELLED: "CANCELLED",
    COMPENSATION_STARTED: "RUNNING",
    COMPENSATION_COMPLETED: "COMPLETED",
    COMPENSATION_FAILED: "FAILED",
    TEARDOWN_STARTED: "RUNNING",
    TEARDOWN_COMPLETED: "COMPLETED",
    TEARDOWN_FAILED: "FAILED",
    BUDGET_EXCEEDED: "FAILED",
    EXECUTION_STALLED: "FAILED",
    EXECUTION_COMPLETED: "COMPLETED",
    EXECUTION_FAILED: "FAILED",
    STEP_RETRY_REQUESTED: "PENDING",
    STEP_SKIP_REQUESTED: "COMPLETED",
    STEP_REUSED: "COMPLETED",
}


SETTLES = "settles"
"""`meta.settles: true` on a `command.failed` the engine writes itself, for a command no
report will settle (a cancelled run's queued commands, an abandoned or stalled attempt, a
retry or skip of a live attempt, a run torn down after an engine error). It was built from
the command row read before the append: the store writes it only while that row is still
open (queued or claimed) at the event's `meta.epoch`, else a claim, report or expiry came
in between and the caller reads again (`store.port.fences`). The API drops the mark from
what clients send."""


INFORMATIVE = "informative"
"""`meta.informative: true` on an event of a type the engine does not know (a NoETL
worker's, DSL 12.3): the API sets it when it stores one, and the fold passes over such an
event instead of refusing the log (`core.fold.fold`). Read only on unknown types: a client
cannot make a known event informative."""


def informative(event: Event) -> bool:
    """An event of a type the engine does not know, stored for people and never folded."""
    return event.event_type not in EVENT_TYPES and event.meta.get(INFORMATIVE) is True


def canonical_type(name: str) -> str:
    """The event type for a wire name, resolving NoETL's aliases."""
    return ALIASES.get(name, name)


def default_status(event_type: str) -> str:
    return _DEFAULT_STATUS.get(event_type, "INFO")


@record
class Event:
    """One immutable fact of one execution."""

    event_id: int
    execution_id: int
    event_type: str
    created_at: float
    """Seconds since the epoch, given by whoever created the event (core never reads a clock)."""
    step: str | None = None
    status: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    parent_event_id: int | None = None
    worker_id: str | None = None
    seq: int = 0
    """Position in the store's log, assigned when appended; 0 until then."""

    def envelope_result(self) -> dict[str, Any]:
        """The NoETL wire form of the payload: `{status, context}`."""
        result: dict[str, Any] = {"status": self.status or default_status(self.event_type)}
        if self.payload:
            result["context"] = self.payload
        return result


def new_event(
    event_id: int,
    execution_id: int,
    event_type: str,
    now: float,
    *,
    step: str | None = None,
    status: str | None = None,
    payload: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    parent_event_id: int | None = None,
    worker_id: str | None = None,
) -> Event:
    # positional: an event is made for every fact of every step
    return Event(
        event_id,
        execution_id,
        event_type,
        now,
        step,
        status or default_status(event_type),
        payload or {},
        meta or {},
        parent_event_id,
        worker_id,
    )


def numbered(events: Sequence[Event], last: dict[int, int]) -> list[Event]:
    """`events` as a log keeps them: each with its position (`seq`) after the last one of
    its execution's log in `last`, which is moved on to the last position given. The
    events themselves are not changed: a copy each, the same fact."""
    out = []
    for e in events:
        seq = last[e.execution_id] = last[e.execution_id] + 1
        # positional construction: dataclasses.replace is several times slower here
        out.append(
            Event(
                e.event_id,
                e.execution_id,
                e.event_type,
                e.created_at,
                e.step,
                e.status,
                e.payload,
                e.meta,
                e.parent_event_id,
                e.worker_id,
                seq,
            )
        )
    return out


def restored(
    seq: int,
    event_id: int,
    execution_id: int,
    parent_event_id: int | None,
    event_type: str,
    step: str | None,
    status: str | None,
    payload: dict[str, Any],
    meta: dict[str, Any],
    worker_id: str | None,
    created_at: float,
) -> Event:
    """An event read back from a log (the store's columns, in their order): as it was
    stored, nothing defaulted (`new_event` gives a status to an event made without one)."""
    return Event(
        event_id=event_id,
        execution_id=execution_id,
        event_type=event_type,
        created_at=created_at,
        step=step,
        status=status,
        payload=payload,
        meta=meta,
        parent_event_id=parent_event_id,
        worker_id=worker_id,
        seq=seq,
    )


_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)


def to_json(value: Any) -> str:
    """`json.dumps(value, default=str)`, character for character, without the encoder
    `dumps` builds and configures in Python on every call: the store encodes every
    event's result and meta, and that setup was a third of the time."""
    if _C_ENCODER is None:  # a Python without the json accelerator
        return json.dumps(value, default=str)
    encode = _C_ENCODER(
        {}, str, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
    return "".join(encode(value, 0))


def jsonable(value: Any) -> Any:
    """`value` as JSON will carry it and the log keeps it: what is not JSON becomes its
    `str`, keys become strings, tuples lists, a NaN or an infinity null (JSON has neither:
    a server refuses them, and no JSON reader takes them back), for every store, the wire
    and a digest alike."""
    try:
        return json.loads(json.dumps(value, default=str, allow_nan=False))
    except ValueError:  # a non-finite float somewhere: the rare path walks the value
        return _finite(json.loads(json.dumps(value, default=str)))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
