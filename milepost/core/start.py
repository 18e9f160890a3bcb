"""A run's start: its `execution.started`, what it carries and what it is caused by.

Pure: the ids, the time, the workload as the log shows it (secret values sealed away by
the engine, `engine.seal`) and the parent's state come in; the engine (`Orchestrator.
start`) appends what this returns, with a restart's `step.reused` after it
(`core.actions.Origin`).
"""

from __future__ import annotations

from typing import Any

from milepost.core import actions, liveness
from milepost.core import events as ev
from milepost.core import state as st
from milepost.core import tracecontext as tc
from milepost.playbook import model


def started(
    event_id: int,
    execution_id: int,
    now: float,
    playbook: model.Playbook,
    version: int,
    workload: dict[str, Any],
    *,
    parent_execution_id: int | None = None,
    parent: st.ExecutionState | None = None,
    parent_command_id: int | None = None,
    sealed: str | None = None,
    started_by: str | None = None,
    origin: actions.Origin | None = None,
) -> ev.Event:
    """The `execution.started` of a run of `playbook` (catalog `version`) with `workload`
    as shown (`sealed`: the sealed real one, when it holds secrets). A child run
    (`parent_command_id`: its parent's command that starts it; `parent`: the parent's
    state, when known) is in its parent's trace, caused by that command, and started by
    whoever started its parent unless `started_by` names someone. `origin`: a restart's
    or a re-run's fields (another entry step, the run it comes from)."""
    if started_by is None and parent is not None:
        started_by = parent.started_by
    payload = {
        "path": playbook.path,
        "version": version,
        "workload": workload,
        "entry_step": playbook.entry_step,
        "name": playbook.name,
        "parent_execution_id": parent_execution_id,
    }
    if parent_command_id is not None:  # and its parent's trace: the others unchanged
        payload.update(tc.child_fields(parent, parent_command_id))
    if sealed is not None:
        payload["sealed_workload"] = sealed
    if started_by is not None:
        payload["started_by"] = started_by
    # a stall window, if any; a restart's entry step and the run it comes from
    payload.update(liveness.started_fields(playbook), **(origin.started if origin else {}))
    # a child run is caused by its parent's command (the `command.issued` event)
    return ev.new_event(
        event_id,
        execution_id,
        ev.EXECUTION_STARTED,
        now,
        payload=payload,
        parent_event_id=parent_command_id,
    )
