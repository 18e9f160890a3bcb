"""Cancel settlement: a queued command of a run whose cancel was requested is failed by
the engine, since claims are refused for it and no worker would ever report it."""

from __future__ import annotations

from milepost.core import events as ev
from milepost.store import port

CANCELLED_BEFORE_CLAIM = {"kind": "cancelled", "retryable": False,
                          "message": "execution cancelled before the command ran"}  # fmt: skip


def cancelled_report(row: port.CommandRow, event_id: int, now: float) -> ev.Event:
    """The `command.failed` that settles a queued command of a cancelled run."""
    epoch = row.epoch
    payload = {"command_id": row.command_id, "run": row.run, "index": row.index,
               "attempt": row.attempt, "epoch": epoch, "error": dict(CANCELLED_BEFORE_CLAIM)}  # fmt: skip
    return ev.new_event(event_id, row.execution_id, ev.COMMAND_FAILED, now, step=row.step,
                        payload=payload, meta={"epoch": epoch, "source": "server"},
                        parent_event_id=row.command_id)  # fmt: skip
