"""The wire codec: how a claimed command and the events that report it look in JSON.

Both ends of the HTTP transport meet here (docs/server-contract.md, "The command, as
returned by claim" and `POST /api/events/batch`): the server encodes a command from the
state and the worker decodes it into the `WorkItem` it runs; the worker encodes its
report events and the server reads them. Loop results are the one value JSON cannot
carry as they are: they travel as plain lists, with their failed counts beside them in
`loop_steps`, and are wrapped in `LoopResult` again on arrival.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from milepost.core import events as ev
from milepost.core import state as st
from milepost.core.events import jsonable as jsonable  # the wire carries what the log keeps
from milepost.core.work import WorkItem
from milepost.playbook import model
from milepost.playbook.loop_result import LoopResult


def plain(value: Any) -> Any:
    """`value` with every loop result (and tuple) as a plain list, for the wire."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


COMPENSATION_RESULT = "compensation.result"
"""The `loop_steps` name of a compensation's loop result (`compensation.result`, DSL 10.5):
no step is named so (a step name has no dot), and a worker that does not know it skips it."""


def loop_steps(
    state: st.ExecutionState, playbook: model.Playbook, context: Mapping[str, Any]
) -> dict[str, dict[str, int]]:
    """The loop steps named in `context`, with the failed count of their latest result,
    and a compensation's loop result (what `plain` drops and `work_item_from_wire`
    restores)."""
    out: dict[str, dict[str, int]] = {}
    undoing = context.get("compensation")
    if isinstance(undoing, Mapping) and isinstance(undoing.get("result"), LoopResult):
        out[COMPENSATION_RESULT] = {"failed": undoing["result"].failed}
    for name in context:
        step = playbook.steps.get(name)
        if step is None or step.loop is None:
            continue
        result = state.results.get(name)
        out[name] = {"failed": result.failed if isinstance(result, LoopResult) else 0}
    return out


def work_item_from_wire(command: Mapping[str, Any]) -> WorkItem:
    """The `WorkItem` of a claimed command as the server sent it.

    Raises:
        KeyError, TypeError, ValueError: the command lacks a field or has one of the
            wrong type (the caller logs it; the lease then expires).
    """
    context: dict[str, Any] = dict(command.get("context") or {})
    for name, info in (command.get("loop_steps") or {}).items():
        failed = int(info.get("failed", 0)) if isinstance(info, Mapping) else 0
        undoing = context.get("compensation")
        if name == COMPENSATION_RESULT and isinstance(undoing, Mapping):
            value = undoing.get("result")
            if isinstance(value, list) and not isinstance(value, LoopResult):
                context["compensation"] = {**undoing, "result": LoopResult(value, failed=failed)}
            continue
        value = context.get(name)
        if isinstance(value, list) and not isinstance(value, LoopResult):
            context[name] = LoopResult(value, failed=failed)
    execution_id = int(command["execution_id"])
    context.setdefault("workload", {})
    context.setdefault("ctx", {})
    context.setdefault("iter", {})
    context.setdefault("execution_id", str(execution_id))
    lease = command.get("lease") or {}
    return WorkItem(
        command_id=int(command.get("command_id") or command["event_id"]),
        execution_id=execution_id,
        step=str(command["step"]),
        run=int(command.get("run", 1)),
        index=int(command.get("index", -1)),
        attempt=int(command.get("attempt", 1)),
        idempotency_key=str(command.get("idempotency_key") or ""),
        context=context,
        args=dict(command.get("args") or {}),
        epoch=int(lease.get("epoch", 0)),
        approved_digest=command.get("approved_digest"),
        approval_expires_at=_time(command.get("approval_expires_at")),
        traceparent=command.get("traceparent"),
    )


def _time(value: Any) -> float | None:
    """A time the server sent (ISO-8601 UTC, as every time on the wire) as epoch seconds."""
    if value is None:
        return None
    moment = datetime.fromisoformat(str(value))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def event_to_wire(
    event: ev.Event, epoch: int, parent_event_id: int | None = None
) -> dict[str, Any]:
    """A report event in the shape of `POST /api/events/batch`, fenced by `meta.epoch`."""
    return {
        "event_id": str(event.event_id),
        "execution_id": str(event.execution_id),
        "parent_event_id": None if parent_event_id is None else str(parent_event_id),
        "event_type": event.event_type,
        "step": event.step,
        "status": event.status,
        "result": event.envelope_result(),
        "meta": {**event.meta, "epoch": epoch},
        "worker_id": event.worker_id,
        "created_at": event.created_at,
    }
