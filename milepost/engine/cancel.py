"""Cancel settlement: a queued command of a run whose cancel was requested is failed by
the engine, since claims are refused for it and no worker would ever report it (the
attempts still live when the grace ends: `core.cancellation.abandoned`); and the
children a cancel reaches."""

from __future__ import annotations

from collections.abc import Iterator

from milepost.core import cancellation
from milepost.core import events as ev
from milepost.core import state as st
from milepost.store import port

CANCELLED_BEFORE_CLAIM = {"kind": "cancelled", "retryable": False,
                          "message": "execution cancelled before the command ran"}  # fmt: skip
CHILDREN_PAGE = 500


def cancelled_report(row: port.CommandRow, event_id: int, now: float) -> ev.Event:
    """The `command.failed` that settles a queued command of a cancelled run."""
    return cancellation.failed_event(row.execution_id, row.command_id, row.step,
                                     (row.run, row.index, row.attempt), row.epoch,
                                     CANCELLED_BEFORE_CLAIM, event_id, now)  # fmt: skip


def children_of(store: port.Store, execution_id: int) -> Iterator[int]:
    """The running executions whose parent is `execution_id` (the `playbook` tool's). The
    store has no index by parent: a cancel is rare, a page through the running ones is
    cheap enough for it."""
    offset = 0
    while True:
        rows = store.list_executions(status=st.RUNNING, limit=CHILDREN_PAGE, offset=offset)
        for row in rows:
            if row.parent_execution_id == execution_id:
                yield row.execution_id
        if len(rows) < CHILDREN_PAGE:
            return
        offset += len(rows)
