"""The operator's actions as the fold sees them (`core.actions` makes their events).

`core.fold` folds them through the handlers here. Each sets the step run up so that
`core.decide` does the rest as it always does: a retry makes the step's attempts due now
(phase 6 issues them), a skip gives the step its results (phase 2 completes it, its `set`
and arcs rendered from them), a reused result is a completed step of the new run.
"""

from __future__ import annotations

from milepost.core import context as cx
from milepost.core import events as ev
from milepost.core import state as st
from milepost.core.state import ExecutionState


def apply_retry_requested(state: ExecutionState, event: ev.Event) -> None:
    p = event.payload
    sr = state.running.get(event.step or "")
    if sr is None or sr.run != int(p["run"]):
        return
    for index in map(int, p.get("indexes") or ()):
        sr.failures.pop(index, None)  # its stopped attempt's failure: not the step's
        if index not in sr.results and index not in sr.in_flight:  # another writer's
            sr.retry_at[index] = event.created_at  # report or attempt got there first


def apply_skip_requested(state: ExecutionState, event: ev.Event) -> None:
    step = event.step or ""
    p = event.payload
    run = int(p["run"])
    sr = state.running.get(step)
    if sr is None and step in state.pending:  # selected, not started: it starts done
        sr = state.running[step] = st.StepRun(step=step, run=run, args=state.pending.pop(step))
        state.run_counts[step] = max(state.run_counts.get(step, 0), run)
        state.step_status[step] = st.RUNNING
    if sr is None or sr.run != run:
        return
    sr.failures.clear()
    sr.retry_at.clear()
    result = p.get("result")
    if sr.is_loop and isinstance(result, list):
        sr.items = ((sr.items or []) + [None] * len(result))[: len(result)]
        sr.results = dict(enumerate(result))
    else:
        sr.results = {st.NO_INDEX: result}


def apply_reused(state: ExecutionState, event: ev.Event) -> None:
    """A step run completed in the run this one restarts: as its `step.exit` left it."""
    step = event.step or ""
    p = event.payload
    run = int(p.get("run", 1))
    st.completed_run(state, step, run, p)  # no `compensable`: a compensation reads it
    state.step_status[step] = st.COMPLETED
    state.run_counts[step] = max(state.run_counts.get(step, 0), run)
    state.ctx = cx.with_writes(state.ctx, p.get("ctx") or {})
