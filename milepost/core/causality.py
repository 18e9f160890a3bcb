"""Causality: which event caused each event the engine decides (`Event.parent_event_id`).

The fold notes, per execution, the last event of each step, of each command index and
the event that made a step pending (`Causes.note`); `cause` reads those notes and the
events already emitted in the same decision to name the parent of a decided event:

- `command.issued` <- the `step.enter` / `approval.granted` of the same decision; a retry
  <- its `command.retry_scheduled`; a loop's next iteration <- the report that freed
  its slot;
- `command.retry_scheduled` <- the failure of that index;
- `step.enter` <- the `step.exit` (or `execution.started`) whose arc selected the step;
- any other step event <- the step's last event (a `step.exit` <- the `command.completed`
  that finished the step);
- an execution event <- the last event folded (or emitted in the decision).

The notes are not in any payload: stored histories fold to the same state, and a log
without parents (written before this) folds as it always did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from milepost.core import events as ev


@dataclass(slots=True)
class Causes:
    """What the fold noted for naming causes: event ids, never payloads."""

    last: int | None = None
    """The last event folded that may change a decision (claims and releases do not)."""
    by_step: dict[str, int] = field(default_factory=dict)
    """step -> its last event."""
    by_index: dict[str, dict[int, int]] = field(default_factory=dict)
    """step -> command index -> the last report or retry of that index (dropped when the
    step exits: a loop's notes do not outlive its run)."""
    selected_by: dict[str, int] = field(default_factory=dict)
    """step -> the event that made it pending (an arc of a `step.exit`, the entry step of
    `execution.started`)."""

    def note(self, event: ev.Event, commands: Mapping[int, Any]) -> None:
        """Note a folded event; `commands`: the live commands (each with its `index`),
        read before the event settles its command."""
        if event.event_type in ev.CLAIM_EVENTS:
            return
        self.last = event.event_id
        step = event.step
        payload = event.payload
        etype = event.event_type
        if etype == ev.EXECUTION_STARTED:
            entry = payload.get("entry_step")
            if entry:
                self.selected_by[entry] = event.event_id
            return
        if step is None:
            return
        if etype == ev.STEP_EXIT:
            # the run is over: what its events were does not cause the step's next run
            self.by_step.pop(step, None)
            self.by_index.pop(step, None)
            for target in payload.get("next") or ():
                if isinstance(target, Mapping) and target.get("step"):
                    self.selected_by[str(target["step"])] = event.event_id
            return
        self.by_step[step] = event.event_id
        if etype != ev.COMMAND_ISSUED and (index := _index(payload, commands)) is not None:
            self.by_index.setdefault(step, {})[index] = event.event_id


@dataclass(slots=True)
class Emitted:
    """What one decision emitted so far, as `cause` reads it: kept as the events are
    emitted, so naming the cause of each of a loop's thousands of `command.issued` in one
    decision is a lookup (a walk back through the decision's events made that quadratic:
    8,000 iterations issued at once took 0.7 s of the orchestrator's lock)."""

    last: int | None = None
    """The last event emitted."""
    by_step: dict[str, int] = field(default_factory=dict)
    """step -> its last event emitted that is not a `command.issued`."""

    def add(self, event: ev.Event) -> None:
        self.last = event.event_id
        if event.step is not None and event.event_type != ev.COMMAND_ISSUED:
            self.by_step[event.step] = event.event_id


def _index(payload: Mapping[str, Any], commands: Mapping[int, Any]) -> int | None:
    command_id = payload.get("command_id")
    try:
        command = commands.get(int(command_id)) if command_id is not None else None
        if command is not None:
            return int(command.index)
        return int(payload["index"]) if "index" in payload else None
    except (TypeError, ValueError):
        return None


def cause(
    causes: Causes, emitted: Emitted, event_type: str, step: str | None, payload: Mapping[str, Any]
) -> int | None:
    """The parent of a decided event, before it is emitted (`emitted`: what the same
    decision emitted so far)."""
    if step is None:
        return emitted.last if emitted.last is not None else causes.last
    if event_type == ev.STEP_ENTER:
        return causes.selected_by.get(step, causes.last)
    # the loop's several `command.issued` of one decision share the enter's cause
    earlier = emitted.by_step.get(step)
    if earlier is not None:
        return earlier
    index = payload.get("index")
    # a retry's issue <- its retry_scheduled; a retry_scheduled <- the failure
    retry = event_type == ev.COMMAND_RETRY_SCHEDULED or (
        event_type == ev.COMMAND_ISSUED and int(payload.get("attempt", 1)) > 1
    )
    if retry and index is not None:
        noted = causes.by_index.get(step, {}).get(int(index))
        if noted is not None:
            return noted
    return causes.by_step.get(step, causes.selected_by.get(step, causes.last))
