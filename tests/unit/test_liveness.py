"""Liveness and stalls in the pure core and at load: a step's liveness rides on its
`command.issued` (only when set), `stall_after` is bound by nothing at load, what moves a
run (`last_progress`), and `stall_verdict` fails a run nothing moves, naming what it
waited for."""

from __future__ import annotations

import pytest

from milepost import ids
from milepost.core import events as ev
from milepost.core import liveness
from milepost.errors import PlaybookInvalid
from milepost.playbook import load
from tests.unit.sim import HEADER, Sim, playbook

TWO = """
executor: {spec: {liveness: 40s}}
workflow:
  - step: start
    tool: {kind: noop}
    spec: {liveness: 5s}
    next: second
  - step: second
    tool: {kind: noop}
"""


def _issued(events: list[ev.Event], step: str) -> ev.Event:
    return next(e for e in events if e.event_type == ev.COMMAND_ISSUED and e.step == step)


def test_a_step_s_liveness_or_the_executor_s_is_its_command_s_lease() -> None:
    sim = Sim(playbook(TWO))
    assert _issued(sim.log, "start").payload["lease_s"] == 5.0
    sim.complete("start", {})
    assert _issued(sim.log, "second").payload["lease_s"] == 40.0  # executor.spec default


def test_a_step_with_a_timeout_and_no_liveness_gets_a_lease_past_its_timeout() -> None:
    """DSL 10.2: the default liveness is never below the timeout."""
    sim = Sim(
        playbook("workflow:\n  - step: start\n    tool: {kind: noop}\n    spec: {timeout: 2m}\n")
    )
    assert _issued(sim.log, "start").payload["lease_s"] == 120.0 + liveness.REPORT_MARGIN_S


def test_a_step_without_liveness_issues_the_command_as_before() -> None:
    sim = Sim(playbook("workflow:\n  - step: start\n    tool: {kind: noop}\n"))
    assert set(_issued(sim.log, "start").payload) == {
        "command_id",
        "run",
        "index",
        "attempt",
        "idempotency_key",
    }


def test_a_lost_attempt_is_issued_again_with_its_lease_a_new_key_and_the_same_operation() -> None:
    sim = Sim(playbook(TWO))
    [first] = sim.live("start")
    sim.lose(first)
    [again] = sim.live("start")
    reissued = [e for e in sim.log if e.event_type == ev.COMMAND_ISSUED and e.step == "start"]
    assert [e.payload["attempt"] for e in reissued] == [1, 2]
    assert reissued[1].payload["lease_s"] == 5.0
    assert again.idempotency_key != first.idempotency_key
    assert ids.operation_key(77, "start", again.run, None) == ids.operation_key(
        77, "start", first.run, None
    )


def _problems(text: str) -> list[str]:
    with pytest.raises(PlaybookInvalid) as info:
        load.load_text(HEADER + text, source="inline.yaml")
    return info.value.problems


def test_stall_after_is_not_tied_to_any_step_s_timeout() -> None:
    """A step may rightly run longer than the stall window (a slow model, a big query):
    its live attempt moves its run (`last_progress`), so no bound between the two is
    checked at load, whether the step sets a timeout, inherits one or has none."""
    text = """executor: {spec: {stall_after: 30s, timeout: 1m}}
workflow:
  - step: start
    tool: {kind: noop}
    spec: {timeout: 2m, liveness: 3m}
    next: other
  - step: other
    tool: {kind: noop}
"""
    assert load.load_text(HEADER + text).executor.stall_after == 30.0


@pytest.mark.parametrize(
    "value, message",
    [
        (
            "soon",
            "executor.spec.stall_after: invalid duration 'soon' (expected e.g. 30s, 5m, 2h,"
            " 1d or a number of seconds) (line 4)",
        ),
        ("0", "executor.spec.stall_after: must be greater than 0, got '0' (line 4)"),
    ],
)
def test_a_bad_stall_after_is_a_load_error_naming_it(value: str, message: str) -> None:
    text = (
        f"executor: {{spec: {{stall_after: '{value}'}}}}\n"
        "workflow:\n  - step: start\n    tool: {kind: noop}\n"
    )
    assert _problems(text) == [message]


STALLING = """
executor: {spec: {stall_after: 1h, timeout: 10m}}
workflow:
  - step: start
    tool: {kind: noop}
    next: work
  - step: work
    tool: {kind: noop}
    loop: {in: "{{ [1, 2] }}", iterator: n, mode: parallel}
"""


def test_stall_verdict_fails_a_silent_run_naming_what_it_waited_for() -> None:
    sim = Sim(playbook(STALLING))
    assert sim.state.started_at == 1000.0 and sim.pb.executor.stall_after == 3600.0
    sim.complete("start", {})
    work = sim.live("work")
    holders = {work[0].command_id: "host-a:12", work[1].command_id: None}
    assert liveness.stall_verdict(sim.state, sim.pb, 1000.0 + 3600, 1000.0, holders) is None
    error = liveness.stall_verdict(sim.state, sim.pb, 1000.0 + 3601, 1000.0, holders)
    assert error is not None and error["kind"] == "stalled"
    assert error["message"] == (
        "no progress for 3601s (executor.spec.stall_after 3600s): waiting for step 'work[0]'"
        " attempt 1 (claimed by host-a:12), step 'work[1]' attempt 1 (queued, no worker took"
        " it)"
    )
    assert error["reason"] == "run stalled: " + error["message"]
    waiting = error["waiting"]
    assert waiting["steps"] == ["work"]
    assert [(c["status"], c["worker_id"]) for c in waiting["commands"]] == [
        ("claimed", "host-a:12"),
        ("queued", None),
    ]
    assert waiting["approvals"] == []


def test_a_run_waiting_for_people_is_not_stalled() -> None:
    """An approval has its own `expires_in`: waiting for it is what the run was built to do."""
    sim = Sim(
        playbook(
            "executor: {spec: {stall_after: 1s}}\nworkflow:\n  - step: gate\n"
            '    tool: {kind: noop}\n    spec: {approval: {approvers: ["role:ops"]}}\n'
        )
    )
    assert [a.step for a in sim.state.approvals.values()] == ["gate"]
    assert liveness.stall_verdict(sim.state, sim.pb, 1e9, 0.0, {}) is None


RETRIED = """
executor: {spec: {stall_after: 10s}}
workflow:
  - step: start
    tool: {kind: noop}
    spec: {retry: {max_attempts: 2, delay: 60, retry_on: [boom]}}
"""


def test_a_run_waiting_for_its_own_retry_timer_is_not_stalled_until_the_timer_is_overdue() -> None:
    sim = Sim(playbook(RETRIED))
    [first] = sim.live("start")
    sim.report(first, error={"kind": "boom", "message": "x"})
    assert sim.live("start") == [] and sim.wake_at == 1060.0
    assert liveness.stall_verdict(sim.state, sim.pb, 1059.0, 1000.0, {}) is None
    assert liveness.stall_verdict(sim.state, sim.pb, 1070.0, 1000.0, {}) is None
    error = liveness.stall_verdict(sim.state, sim.pb, 1071.0, 1000.0, {})
    assert error is not None and error["message"].startswith("no progress for 11s")
    assert "retry of step 'start'" in error["message"]


def test_stall_verdict_has_nothing_to_say_without_a_window_or_after_the_end() -> None:
    quiet = Sim(playbook("workflow:\n  - step: start\n    tool: {kind: noop}\n"))
    assert liveness.stall_verdict(quiet.state, quiet.pb, 1e9, 0.0, {}) is None
    done = Sim(
        playbook(
            "executor: {spec: {stall_after: 1s}}\n"
            "workflow:\n  - step: start\n    tool: {kind: noop}\n"
        )
    )
    done.run_all()
    assert done.state.terminal
    assert liveness.stall_verdict(done.state, done.pb, 1e9, 0.0, {}) is None
    cancelling = Sim(playbook(STALLING))
    assert liveness.stall_verdict(cancelling.state, cancelling.pb, 1e9, 0.0, {}) is not None
    cancelling.state.cancel_requested = True  # its commands still out: not yet CANCELLED
    assert liveness.stall_verdict(cancelling.state, cancelling.pb, 1e9, 0.0, {}) is None


def test_the_stall_window_rides_on_execution_started_only_when_set() -> None:
    assert liveness.started_fields(playbook(STALLING)) == {"stall_after": 3600.0}
    assert liveness.started_fields(playbook(TWO)) == {}


TORN = """
executor: {spec: {stall_after: 10s, teardown: [cleanup]}}
workflow:
  - step: start
    tool: {kind: noop}
  - step: cleanup
    tool: {kind: noop}
    spec: {retry: {max_attempts: 2, delay: 60, retry_on: [boom]}}
"""


def test_a_run_waiting_for_a_teardown_step_s_retry_timer_is_not_stalled_before_it() -> None:
    """A final step's timer (a teardown's, a compensation's) is the run's own, as a step's."""
    sim = Sim(playbook(TORN))
    sim.complete("start", {})
    [first] = sim.live("cleanup")
    sim.report(first, error={"kind": "boom", "message": "x"})
    assert sim.live() == [] and sim.wake_at == sim.now + 60
    due = sim.now + 60
    assert liveness.stall_verdict(sim.state, sim.pb, due + 10, 1000.0, {}) is None
    error = liveness.stall_verdict(sim.state, sim.pb, due + 11, 1000.0, {})
    assert error is not None and "retry of step 'cleanup'" in error["message"]
