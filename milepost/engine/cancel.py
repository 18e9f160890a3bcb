"""Cancel settlement: a queued command of a run whose cancel was requested is failed by
the engine, since claims are refused for it and no worker would ever report it (the
attempts still live when the grace ends: `core.cancellation.abandoned`). The children
a cancel reaches come from the store (`running_children`, indexed by parent)."""

from __future__ import annotations

from milepost.core import cancellation
from milepost.core import events as ev
from milepost.store import port

CANCELLED_BEFORE_CLAIM = {
    "kind": cancellation.CANCELLED_KIND,
    "retryable": False,
    "message": "execution cancelled before the command ran",
}


def cancelled_report(row: port.CommandRow, event_id: int, now: float) -> ev.Event:
    """The `command.failed` that settles a queued command of a cancelled run."""
    return cancellation.failed_event(
        row.execution_id,
        row.command_id,
        row.step,
        (row.run, row.index, row.attempt),
        row.epoch,
        CANCELLED_BEFORE_CLAIM,
        event_id,
        now,
    )
