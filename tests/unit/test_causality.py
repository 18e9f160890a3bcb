"""Every decided event names its cause (`parent_event_id`), read off the fold's notes."""

from __future__ import annotations

from milepost.core import causality
from milepost.core import events as ev
from tests.shared import LinesRun
from tests.unit.sim import Sim, playbook


def _by(sim: Sim, event_type: str, step: str | None = None, nth: int = 0) -> ev.Event:
    found = [e for e in sim.log if e.event_type == event_type and (step is None or e.step == step)]
    return found[nth]


def _parent(sim: Sim, event: ev.Event) -> ev.Event:
    assert event.parent_event_id is not None, f"{event.event_type} {event.step} has no parent"
    return next(e for e in sim.log if e.event_id == event.parent_event_id)


def _names(sim: Sim, event: ev.Event) -> tuple[str, str | None]:
    parent = _parent(sim, event)
    return parent.event_type, parent.step


CHAIN = """
workflow:
  - step: start
    tool: {kind: noop}
    next: end
  - step: end
    tool: {kind: noop}
"""


def test_a_chain_of_steps_names_the_report_that_finished_each_step_and_the_exit_that_chose_the_next() -> (
    None
):  # noqa: E501
    sim = Sim(playbook(CHAIN))
    sim.complete("start", {"a": 1})
    sim.complete("end", {"b": 2})
    started = _by(sim, ev.EXECUTION_STARTED)
    assert _parent(sim, _by(sim, ev.STEP_ENTER, "start")) == started
    assert _names(sim, _by(sim, ev.COMMAND_ISSUED, "start")) == (ev.STEP_ENTER, "start")
    assert _parent(sim, _by(sim, ev.STEP_EXIT, "start")) == _by(sim, ev.COMMAND_COMPLETED, "start")
    assert _parent(sim, _by(sim, ev.STEP_ENTER, "end")) == _by(sim, ev.STEP_EXIT, "start")
    assert _names(sim, _by(sim, ev.COMMAND_ISSUED, "end")) == (ev.STEP_ENTER, "end")
    assert _parent(sim, _by(sim, ev.STEP_EXIT, "end")) == _by(sim, ev.COMMAND_COMPLETED, "end")
    assert _parent(sim, _by(sim, ev.EXECUTION_COMPLETED)) == _by(sim, ev.STEP_EXIT, "end")
    decided = [
        e for e in sim.log if e.event_type not in (ev.EXECUTION_STARTED, ev.COMMAND_COMPLETED)
    ]
    assert all(e.parent_event_id is not None for e in decided)


RETRIED = """
workflow:
  - step: flaky
    tool: {kind: noop}
    spec: {retry: {max_attempts: 3, backoff: fixed, delay: 5, retry_on: [timeout]}}
"""


def test_a_retry_is_caused_by_the_failure_and_its_issue_by_the_retry_when_the_timer_fires() -> None:
    sim = Sim(playbook(RETRIED))
    sim.complete("flaky", error={"kind": "timeout", "message": "slow"})
    failed = _by(sim, ev.COMMAND_FAILED, "flaky")
    scheduled = _by(sim, ev.COMMAND_RETRY_SCHEDULED, "flaky")
    assert _parent(sim, scheduled) == failed
    sim.fire()  # no report: the cause is read off the state's notes
    again = _by(sim, ev.COMMAND_ISSUED, "flaky", nth=1)
    assert again.payload["attempt"] == 2
    assert _parent(sim, again) == scheduled


LOOP = """
workflow:
  - step: each
    loop: {in: "{{ [1, 2, 3] }}", iterator: n, spec: {mode: parallel, max_in_flight: 2}}
    tool: {kind: noop}
"""


def test_a_loops_first_issues_share_its_enter_and_a_later_one_names_the_report_that_freed_its_slot() -> (
    None
):  # noqa: E501
    sim = Sim(playbook(LOOP))
    enter = _by(sim, ev.STEP_ENTER, "each")
    first = [e for e in sim.log if e.event_type == ev.COMMAND_ISSUED]
    assert len(first) == 2 and all(_parent(sim, e) == enter for e in first)
    second = next(c for c in sim.live() if c.index == 1)
    sim.report(second, "two")
    third = _by(sim, ev.COMMAND_ISSUED, "each", nth=2)
    assert third.payload["index"] == 2
    assert _parent(sim, third) == _by(sim, ev.COMMAND_COMPLETED, "each")
    sim.run_all()
    last_report = [e for e in sim.log if e.event_type == ev.COMMAND_COMPLETED][-1]
    assert _parent(sim, _by(sim, ev.LOOP_DONE, "each")) == last_report
    assert _parent(sim, _by(sim, ev.STEP_EXIT, "each")) == _by(sim, ev.LOOP_DONE, "each")


FAN_OUT = """
workflow:
  - step: start
    tool: {kind: noop}
    next: {spec: {mode: inclusive}, arcs: [{step: left}, {step: right}]}
  - step: left
    tool: {kind: noop}
  - step: right
    tool: {kind: noop}
"""


def test_each_branch_of_a_fan_out_names_the_exit_that_chose_it() -> None:
    sim = Sim(playbook(FAN_OUT))
    sim.complete("start")
    exit_start = _by(sim, ev.STEP_EXIT, "start")
    for branch in ("left", "right"):
        assert _parent(sim, _by(sim, ev.STEP_ENTER, branch)) == exit_start
        assert _names(sim, _by(sim, ev.COMMAND_ISSUED, branch)) == (ev.STEP_ENTER, branch)


def test_a_cancelled_run_ends_caused_by_the_cancel_once_nothing_runs() -> None:
    sim = Sim(playbook(CHAIN))
    sim.cancel()
    running = sim.live("start")[0]
    sim.report(running, "late but in time")
    assert _parent(sim, _by(sim, ev.STEP_EXIT, "start")) == _by(sim, ev.COMMAND_COMPLETED)
    assert _parent(sim, _by(sim, ev.EXECUTION_CANCELLED)) == _by(sim, ev.STEP_EXIT, "start")


WIDE = """
workflow:
  - step: fan
    loop: {in: "{{ range(3000) | list }}", iterator: i, spec: {mode: parallel, max_in_flight: 3000}}
    tool: {kind: noop}
"""


def test_naming_causes_is_a_few_lines_an_event_however_many_one_decision_issues() -> None:
    # `cause` walked back through the decision's events for each event it named: one
    # decision issuing 8,000 iterations held the orchestrator's lock 0.7 s (quadratic).
    # Counted in lines run inside `causality`, not in seconds
    with LinesRun(causality.__file__) as counted:
        sim = Sim(playbook(WIDE))
    lines = counted.lines
    issued = [e for e in sim.log if e.event_type == ev.COMMAND_ISSUED]
    assert len(issued) == 3000
    enter = _by(sim, ev.STEP_ENTER, "fan")
    assert {e.parent_event_id for e in issued} == {enter.event_id}
    assert lines < 40 * len(sim.log), f"{lines} lines for {len(sim.log)} events"
