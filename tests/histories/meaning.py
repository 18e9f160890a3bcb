"""What a run means: the parts of a folded state a stored history pins.

A history's events must keep folding to the same meaning forever: a stored run is read
again by a newer milepost (a resume, a status page, a child's parent). These are the
fields that say what happened and what is still to happen; bookkeeping that only
speeds the fold up (`seen`, `last_seq`) is left out. The form is plain JSON, so a
recorded meaning and a fresh one compare as equal data.
"""

from __future__ import annotations

import json
from typing import Any

from milepost.core import events as ev
from milepost.core import state as st
from milepost.playbook.loop_result import LoopResult


def meaning(state: st.ExecutionState) -> dict[str, Any]:
    """The run's meaning as plain JSON data."""
    running = {
        step: {
            "run": sr.run,
            "items": sr.items,
            "max_in_flight": sr.max_in_flight,
            "next_index": sr.next_index,
            "in_flight": sr.in_flight,
            "attempts": sr.attempts,
            "results": sr.results,
            "retry_at": sr.retry_at,
            "failed_ok": sr.failed_ok,
            "failures": {
                i: {"attempt": f.attempt, "error": f.error} for i, f in sr.failures.items()
            },
            "error": sr.error,
        }
        for step, sr in state.running.items()
    }
    commands = [
        {
            "command_id": c.command_id,
            "step": c.step,
            "run": c.run,
            "index": c.index,
            "attempt": c.attempt,
            "idempotency_key": c.idempotency_key,
        }
        for c in sorted(state.commands.values(), key=lambda c: c.command_id)
    ]
    torn = {} if state.teardown is None else {"teardown": _teardown(state.teardown)}
    return _plain(
        {
            **torn,
            "status": state.status,
            "path": state.path,
            "version": state.version,
            "workload": state.workload,
            "sealed_workload": state.sealed_workload,
            "parent_execution_id": state.parent_execution_id,
            "parent_command_id": state.parent_command_id,
            "started_at": state.started_at,
            "ended_at": state.ended_at,
            "step_status": state.step_status,
            "results": state.results,
            "ctx": state.ctx,
            "run_counts": state.run_counts,
            "pending": state.pending,
            "running": running,
            "commands": commands,
            "completed_runs": state.completed_runs,
            "failure": state.failure,
            "dead_end": state.dead_end,
            "cancel_requested": state.cancel_requested,
            "error": state.error,
            "event_count": state.event_count,
        }
    )


def _teardown(torn: Any) -> dict[str, Any]:
    """A run's teardown, pinned only for a run that tore down: an older log means what
    it always meant."""
    return {
        "status": torn.status,
        "error": torn.error,
        "items": [
            {
                "step": i.target,
                "run": i.target_run,
                "status": i.status,
                "command_id": i.command_id,
                "attempt": i.attempt,
                "retry_at": i.retry_at,
                "result": i.result,
                "error": i.error,
            }
            for i in torn.items
        ],
    }


def _plain(value: Any) -> Any:
    """JSON data; a loop's result keeps what makes it more than a list (its stats)."""
    if isinstance(value, LoopResult):
        return {"loop": _plain(list(value)), "stats": value.stats}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return json.loads(json.dumps(value))


EVENT_FIELDS = (
    "event_id",
    "execution_id",
    "event_type",
    "created_at",
    "step",
    "status",
    "payload",
    "meta",
    "parent_event_id",
    "worker_id",
    "seq",
)


def event_to_json(event: ev.Event) -> dict[str, Any]:
    """An event as stored in a history file; fields at their default are left out."""
    out = {name: getattr(event, name) for name in EVENT_FIELDS}
    return {k: v for k, v in out.items() if v not in (None, {})}


def event_from_json(data: dict[str, Any]) -> ev.Event:
    return ev.Event(**data)
