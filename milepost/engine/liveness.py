"""Stalled runs (DSL 10.6, `executor.spec.stall_after`), on the engine service.

The store names the candidates (RUNNING runs with a stall window whose last event is older
than it: `stalled_executions`); the decision is the core's (`core.liveness.stall_verdict`,
given `now`, the last event's time and who holds each open command); the failure is an
`execution.failed` of kind `stalled` appended through the orchestrator, so both modes end
such a run alike. The reconciler's tick calls this for every run (server), the embedded
engine's poller for the runs it drives.
"""

from __future__ import annotations

import logging
from collections.abc import Container
from typing import TYPE_CHECKING, Any

from milepost.core import events as ev
from milepost.core import liveness
from milepost.core import state as st
from milepost.playbook import model

if TYPE_CHECKING:
    from milepost.engine.lifecycle import Lifecycle

log = logging.getLogger(__name__)


def fail_stalled(engine: Lifecycle, now: float,
                 only: Container[int] | None = None) -> tuple[list[int], int]:  # fmt: skip
    """Fail the runs (of `only`, when given) that made no progress for their stall window.
    Returns the runs failed and how many could not be checked (logged)."""
    failed: list[int] = []
    errors = 0
    for xid, last_at in engine.store.stalled_executions(now):
        if only is not None and xid not in only:
            continue
        try:
            if _fail_if_stalled(engine, xid, last_at, now):
                failed.append(xid)
        except Exception:
            errors += 1
            log.exception("stall check of execution %s failed", xid,
                          extra={"action": "stall_check_failed", "execution_id": xid})  # fmt: skip
    return failed, errors


def _fail_if_stalled(engine: Lifecycle, xid: int, last_at: float, now: float) -> bool:
    with engine.locked([xid]):  # no report may slip in between the verdict and the failure
        holders = {r.command_id: r.worker_id for r in engine.store.open_commands(xid)}

        def verdict(state: st.ExecutionState, playbook: model.Playbook) -> dict[str, Any] | None:
            return liveness.stall_verdict(state, playbook, now, last_at, holders)

        error = engine.read(xid, verdict)
        if error is None:
            return False
        log.warning("execution %s stalled: %s", xid, error["message"],
                    extra={"action": "execution_stalled", "execution_id": xid})  # fmt: skip
        failed = ev.new_event(engine.new_id(), xid, ev.EXECUTION_FAILED, now,
                              payload={"error": error, "reason": error["reason"]},
                              meta={"source": "reconciler"})  # fmt: skip
        engine.process([failed])
        return True
