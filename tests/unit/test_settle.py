"""`decide.settle`: the orchestrator's decide loop, folded and bounded, as a pure function."""

from __future__ import annotations

import itertools

from milepost.core import decide as dc
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from tests.unit.sim import playbook

TWO_STEPS = """
workflow:
  - step: start
    tool: {kind: noop}
    next: end
  - step: end
    tool: {kind: noop}
"""


def _started(now: float = 1000.0) -> tuple[st.ExecutionState, itertools.count[int]]:
    ids = itertools.count(1)
    started = ev.new_event(
        next(ids),
        7,
        ev.EXECUTION_STARTED,
        now,
        payload={"path": "t", "version": 1, "workload": {}, "entry_step": "start"},
    )
    return fl.fold(None, [started]), ids


def test_settle_folds_every_decision_until_decide_has_nothing_more_to_say() -> None:
    state, ids = _started()
    settled = dc.settle(state, playbook(TWO_STEPS), 1000.0, lambda: next(ids), limit=100)
    assert [(e.event_type, e.step) for e in settled.events] == [
        (ev.STEP_ENTER, "start"),
        (ev.COMMAND_ISSUED, "start"),
    ]
    assert settled.wake_at is None
    assert [c.step for c in state.commands.values()] == ["start"]  # folded into the state
    again = dc.settle(state, playbook(TWO_STEPS), 1000.0, lambda: next(ids), limit=100)
    assert again.events == [] and again.wake_at is None


def test_settle_that_runs_out_of_decisions_asks_to_be_woken_at_once() -> None:
    state, ids = _started()
    pb = playbook(TWO_STEPS)
    dc.settle(state, pb, 1000.0, lambda: next(ids), limit=100)
    cmd = next(iter(state.commands.values()))
    fl.fold(
        state,
        [
            ev.new_event(
                next(ids),
                7,
                ev.COMMAND_COMPLETED,
                1001.0,
                step="start",
                payload={
                    "command_id": cmd.command_id,
                    "run": cmd.run,
                    "index": cmd.index,
                    "attempt": cmd.attempt,
                    "result": {},
                    "ctx": {},
                },
            )
        ],
    )
    cut = dc.settle(state, pb, 1001.0, lambda: next(ids), limit=1)
    assert cut.wake_at == 1001.0, "a settle cut short must ask to be asked again at once"
    rest = dc.settle(state, pb, 1001.0, lambda: next(ids), limit=100)
    assert rest.events and rest.wake_at is None, "the cut settle had more to decide"
    assert [e.event_type for e in cut.events + rest.events][-2:] == [
        ev.STEP_ENTER,
        ev.COMMAND_ISSUED,
    ]
    assert [c.step for c in state.commands.values()] == ["end"]
