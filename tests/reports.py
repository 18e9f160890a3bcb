"""Reports a worker would send, made by hand for tests that drive the engine without one.

`completed` is the short report the engine's own tests send (the command's id and its
result, at the orchestrator's clock); `claim_completed` is the full one a worker holding
a claim sends (run, index, attempt and the claim's epoch, in the payload and the meta)."""

from __future__ import annotations

from typing import Any

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine.orchestrator import Orchestrator
from milepost.store import port


def completed(
    orchestrator: Orchestrator,
    xid: int,
    command: st.Command | port.CommandRow,
    result: Any = 1,
    *,
    epoch: int | None = None,
) -> ev.Event:
    """`command.completed` of `command` of run `xid` with `result`; `epoch`: the claim it
    was made under (a report without one was made by no claim's holder)."""
    return ev.new_event(
        orchestrator.new_id(),
        xid,
        ev.COMMAND_COMPLETED,
        orchestrator.clock(),
        step=command.step,
        payload={"command_id": command.command_id, "result": result},
        meta={"epoch": epoch} if epoch is not None else None,
    )


def claim_completed(
    event_id: int, row: port.CommandRow, lease: port.Lease, now: float, result: Any
) -> ev.Event:
    """`command.completed` of the claimed `row` with `result`, from the holder of `lease`."""
    payload = {
        "command_id": row.command_id,
        "run": row.run,
        "index": row.index,
        "attempt": row.attempt,
        "epoch": lease.epoch,
        "result": result,
    }
    return ev.new_event(
        event_id,
        row.execution_id,
        ev.COMMAND_COMPLETED,
        now,
        step=row.step,
        payload=payload,
        meta={"epoch": lease.epoch},
    )
