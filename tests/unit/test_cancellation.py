"""The pure part of a cancel with a deadline (`core.cancellation`): the grace runs from
the first request, decide asks to be woken at its end, and what the engine then writes
(`abandoned`) ends the run CANCELLED."""

from __future__ import annotations

from milepost.core import cancellation
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from tests.unit.sim import Sim, playbook

TWO = playbook("""
executor: {spec: {cancel_grace: 10s}}
workflow:
  - step: start
    tool: {kind: noop}
    next: after
  - step: after
    tool: {kind: noop}
""")


def test_the_grace_runs_from_the_first_request_and_decide_wakes_at_its_end() -> None:
    sim = Sim(TWO, now=1000.0)
    sim.fold_and_settle(ev.EXECUTION_CANCEL_REQUESTED, None, actor="user:alice")
    sim.now = 1004.0
    sim.fold_and_settle(ev.EXECUTION_CANCEL_REQUESTED, None, actor="user:bob")
    assert sim.state.cancel_requested_at == 1000.0 and sim.state.cancel_actor == "user:alice"
    assert sim.wake_at == 1010.0
    assert not cancellation.overdue(sim.state, TWO, 1009.9)
    assert cancellation.overdue(sim.state, TWO, 1010.0)
    # past the end with the attempt still live (the engine not there yet): soon, not now
    assert cancellation.timer(sim.state, TWO, 1012.0) == 1013.0


def test_what_the_engine_writes_at_the_end_of_the_grace_ends_the_run_cancelled() -> None:
    sim = Sim(TWO, now=1000.0)
    [cmd] = sim.live()
    sim.cancel()
    assert sim.state.status == st.RUNNING and sim.wake_at == 1010.0
    sim.fire()  # the engine's part, as `Lifecycle.wake` does it
    assert sim.state.status == st.CANCELLED and sim.wake_at is None
    [abandoned] = [e for e in sim.log if e.event_type == ev.COMMAND_FAILED]
    assert abandoned.payload["command_id"] == cmd.command_id
    assert abandoned.payload["error"]["kind"] == "cancelled"
    assert "after" not in sim.state.step_status


def test_a_run_without_a_cancel_sets_no_grace_timer() -> None:
    sim = Sim(TWO, now=1000.0)
    assert sim.wake_at is None and cancellation.deadline(sim.state, TWO) is None
    assert cancellation.request_payload(None) == {}  # an old-style request logs nothing new


def test_a_step_stopped_by_the_cancel_is_cancelled_and_an_older_log_still_reads_failed() -> None:
    sim = Sim(TWO, now=1000.0)
    sim.cancel()
    sim.fire()
    [exit_] = [e for e in sim.log if e.event_type == ev.STEP_EXIT]
    assert exit_.status == st.CANCELLED and exit_.payload["error"]["kind"] == "cancelled"
    assert sim.state.step_status["start"] == st.CANCELLED
    # what an older engine wrote for the same end folds as it always did
    old = [e for e in sim.log if e.event_type != ev.STEP_EXIT]
    at = old.index(next(e for e in old if e.event_type == ev.EXECUTION_CANCELLED))
    old.insert(
        at,
        ev.new_event(
            999,
            77,
            ev.STEP_EXIT,
            1010.0,
            step="start",
            status=st.FAILED,
            payload={"run": 1, "error": exit_.payload["error"]},
        ),
    )
    folded = fl.fold(None, old)
    assert folded.step_status["start"] == st.FAILED and folded.status == st.CANCELLED


CALLS = playbook("""
workflow:
  - step: call
    tool: {kind: playbook, path: tests/child}
    next: after
  - step: after
    tool: {kind: noop}
""")
CHILD_CANCELLED = {
    "kind": "playbook",
    "code": cancellation.CHILD_CANCELLED,
    "retryable": False,
    "message": "child playbook 'tests/child' (9) CANCELLED: cancel requested",
}


def test_a_step_whose_child_its_run_s_cancel_reached_first_exits_cancelled() -> None:
    """Issue 33 item 2: the child's end can reach the `playbook` tool before its worker
    hears of the cancel (the server) or after (embedded): the step exits CANCELLED
    either way, as a stopped attempt's step does."""
    sim = Sim(CALLS, now=1000.0)
    [cmd] = sim.live("call")
    sim.cancel()
    events = sim.report(cmd, error=CHILD_CANCELLED)
    [exit_] = [e for e in events if e.event_type == ev.STEP_EXIT]
    assert exit_.status == st.CANCELLED and exit_.payload["reason"] == "cancelled"
    assert sim.state.status == st.CANCELLED


def test_a_step_whose_child_alone_was_cancelled_fails() -> None:
    """DSL 3.5: a CANCELLED child is a task error of kind `playbook` when nobody cancelled
    its parent."""
    sim = Sim(CALLS, now=1000.0)
    [cmd] = sim.live("call")
    events = sim.report(cmd, error=CHILD_CANCELLED)
    [exit_] = [e for e in events if e.event_type == ev.STEP_EXIT]
    assert exit_.status == st.FAILED and exit_.payload["error"]["kind"] == "playbook"
    assert sim.state.status == st.FAILED and "after" not in sim.state.step_status


def test_a_child_s_own_failure_fails_the_step_even_while_its_run_is_cancelled() -> None:
    """Only a cancel reaching the step reads as one: a child that failed on its own made
    the step fail, whatever came after."""
    sim = Sim(CALLS, now=1000.0)
    [cmd] = sim.live("call")
    sim.cancel()
    failed = {"kind": "playbook", "retryable": False, "message": "child (9) FAILED: boom"}
    events = sim.report(cmd, error=failed)
    [exit_] = [e for e in events if e.event_type == ev.STEP_EXIT]
    assert exit_.status == st.FAILED
