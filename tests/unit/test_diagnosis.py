"""The doctor's verdict in the pure core (`core.diagnosis`): one test per finding kind, given
the fold of a simulated run and the facts the engine reads beside it."""

from __future__ import annotations

from typing import Any

from milepost.core import diagnosis as dg
from milepost.core import events as ev
from milepost.core import state as st
from milepost.core import waiting
from milepost.playbook import model
from milepost.store import port
from tests.unit.sim import Sim, playbook

NOW = 1000.0

ONE = """
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
"""


def diagnose(sim: Sim, **facts: Any) -> list[dg.Finding]:
    return dg.diagnose(sim.state, sim.pb, waiting.Facts(facts.pop("now", sim.now), **facts))


def kinds(found: list[dg.Finding]) -> list[str]:
    return [f.kind for f in found]


def claimed(
    sim: Sim,
    step: str,
    worker: str = "worker-1",
    lease_end: float = NOW + 25,
    pool: str = "default",
) -> dict[int, waiting.OpenCommand]:
    return {
        c.command_id: waiting.OpenCommand(
            c.command_id, waiting.CLAIMED_STATUS, worker, lease_end, pool
        )
        for c in sim.live(step)
    }


def queued(sim: Sim, step: str, pool: str = "default") -> dict[int, waiting.OpenCommand]:
    return {
        c.command_id: waiting.OpenCommand(c.command_id, waiting.QUEUED_STATUS, pool=pool)
        for c in sim.live(step)
    }


# -- ended runs ------------------------------------------------------------------------------


def test_a_completed_run_says_so() -> None:
    sim = Sim(playbook(ONE))
    sim.now = NOW + 12
    sim.complete("start", 1)
    (found,) = diagnose(sim)
    assert found.kind == dg.COMPLETED and found.message == "the run completed after 12s"
    assert found.fields == {"ended_at": NOW + 12, "duration_s": 12.0}


def test_a_failed_python_step_names_the_step_the_tool_and_the_line_of_code() -> None:
    sim = Sim(playbook(ONE))
    sim.complete(
        "start",
        error={
            "kind": "exception",
            "message": "ZeroDivisionError: division by zero",
            "code": "ZeroDivisionError",
            "line": 3,
            "code_line": "result = a / b",
        },
    )
    assert sim.state.status == st.FAILED
    (found,) = diagnose(sim)
    assert found.kind == dg.FAILED and found.step == "start"
    assert found.message == (
        "step 'start' (python) failed: ZeroDivisionError: division by zero "
        "at line 3: result = a / b"
    )
    assert {
        "error_kind": "exception",
        "tool": "python",
        "line": 3,
        "code_line": "result = a / b",
        "code": "ZeroDivisionError",
    }.items() <= found.fields.items()


def test_a_template_error_of_an_attempt_names_the_field_and_the_template() -> None:
    sim = Sim(playbook(ONE))
    sim.complete(
        "start",
        error={
            "kind": "template",
            "where": "step 'start': input 'v'",
            "template": "{{ nope }}",
            "message": "step 'start': input 'v': undefined name 'nope' in '{{ nope }}'",
        },
    )
    (found,) = diagnose(sim)
    assert found.message == (
        "step 'start' (python) failed: template error in input 'v': "
        "undefined name 'nope' in '{{ nope }}'"
    )
    assert found.fields["template"] == "{{ nope }}"


def test_a_template_error_decide_met_carries_where_and_the_template() -> None:
    sim = Sim(
        playbook("""
    workflow:
      - step: start
        loop: {in: "{{ nope.deeper }}", iterator: n}
        tool: {kind: noop}
    """)
    )
    assert sim.state.status == st.FAILED
    (found,) = diagnose(sim)
    assert found.kind == dg.FAILED and found.fields["error_kind"] == "template"
    assert found.fields["template"] == "{{ nope.deeper }}"
    assert found.message.startswith("step 'start' (noop) failed: template error in ")
    assert "undefined name 'nope'" in found.message


def test_a_failed_pipeline_task_names_the_task_and_its_tool() -> None:
    sim = Sim(
        playbook("""
    workflow:
      - step: start
        tool:
          - {name: fetch, kind: http, url: "http://x"}
          - {name: parse, kind: python, code: "result = 1"}
    """)
    )
    sim.complete("start", error={"kind": "exception", "message": "KeyError: 'a'", "task": "parse"})
    (found,) = diagnose(sim)
    assert found.message == "step 'start' task 'parse' (python) failed: KeyError: 'a'"
    assert (found.fields["task"], found.fields["tool"]) == ("parse", "python")
    error = {
        "kind": "template",
        "task": "fetch",
        "where": "step 'start' task 'fetch': field 'url'",
        "template": "{{ nope }}",
        "step": "start",
        "message": "step 'start' task 'fetch': field 'url': undefined name 'nope' in '{{ nope }}'",
    }
    assert dg.diagnose(
        st.ExecutionState(1, status=st.FAILED, error=error), sim.pb, waiting.Facts(NOW)
    )[0].message == (
        "step 'start' task 'fetch' (http) failed: template error in field 'url': undefined name "
        "'nope' in '{{ nope }}'"
    )


def test_a_cancelled_run_names_who_cancelled_it() -> None:
    sim = Sim(playbook(ONE))
    sim.fold_and_settle(ev.EXECUTION_CANCEL_REQUESTED, None, actor="user:bob")
    pending, running = diagnose(sim, commands=claimed(sim, "start"))
    assert (pending.kind, running.kind) == (dg.CANCEL_PENDING, dg.CLAIMED)
    assert pending.message == (
        "cancel requested by user:bob 0s ago; 1 attempt(s) still out are "
        "abandoned as cancelled in 30s"
    )
    sim.fire()  # the grace ends: the attempt is abandoned
    assert sim.state.status == st.CANCELLED
    found = diagnose(sim)
    assert kinds(found) == [dg.CANCELLED]
    assert found[0].message == "the run was cancelled by user:bob"
    assert found[0].fields["actor"] == "user:bob"


# -- runs that wait --------------------------------------------------------------------------

BRANCHES = """
workflow:
  - step: start
    tool: {kind: noop}
    next: {spec: {mode: inclusive}, arcs: [{step: a}, {step: b}]}
  - step: a
    tool: {kind: python, code: "result = 1"}
    next: join
  - step: b
    tool: {kind: python, code: "result = 2"}
    next: join
  - step: join
    tool: {kind: noop}
"""


def test_a_failed_step_with_work_still_out_is_failing() -> None:
    sim = Sim(playbook(BRANCHES))
    sim.complete("start")
    sim.complete("a", error={"kind": "exception", "message": "boom"})
    found = diagnose(sim, commands=claimed(sim, "b"))
    assert kinds(found) == [dg.FAILING, dg.CLAIMED]
    assert (
        found[0].message
        == "step 'a' failed: boom; the run fails once the 1 command(s) still out finish"
    )


def test_a_join_waits_for_the_branches_still_running() -> None:
    sim = Sim(playbook(BRANCHES))
    sim.complete("start")
    sim.complete("a")
    found = diagnose(sim, commands=claimed(sim, "b"))
    join = next(f for f in found if f.kind == dg.JOIN_WAITING)
    assert join.step == "join" and join.fields == {"upstream": ["b"]}
    assert join.message == "step 'join' waits at its join for 'b'"


def test_a_claimed_command_names_its_worker_and_when_its_lease_ends() -> None:
    sim = Sim(playbook(ONE))
    (found,) = diagnose(sim, commands=claimed(sim, "start"), live_pools=frozenset({"default"}))
    assert found.kind == dg.CLAIMED and found.step == "start"
    assert found.message == "step 'start' attempt 1 is claimed by worker-1; its lease ends in 25s"
    assert found.fields["worker_id"] == "worker-1" and found.fields["lease_expires_at"] == NOW + 25


def test_a_lease_that_ended_without_a_report_is_named() -> None:
    sim = Sim(playbook(ONE))
    (found,) = diagnose(sim, commands=claimed(sim, "start", lease_end=NOW - 12))
    assert found.kind == dg.LEASE_EXPIRED
    assert found.message == (
        "step 'start' attempt 1: the lease of worker-1 ended 12s ago without "
        "a report; the reconciler takes the command back on its next tick"
    )


def test_a_queued_command_of_a_served_pool_waits_for_a_claim() -> None:
    sim = Sim(playbook(ONE))
    (found,) = diagnose(sim, commands=queued(sim, "start"), live_pools=frozenset({"default"}))
    assert found.kind == dg.QUEUED
    assert (
        found.message
        == "step 'start' attempt 1 is queued: a live worker of pool default should claim it"
    )


def test_a_pool_no_live_worker_serves_is_named_with_its_steps() -> None:
    sim = Sim(playbook(ONE))
    found = diagnose(
        sim, commands=queued(sim, "start", pool="gpu"), live_pools=frozenset({"default"})
    )
    assert kinds(found) == [dg.NO_LIVE_WORKER]
    assert found[0].message == (
        "1 command(s) of step start wait in pool gpu, which no live "
        "worker serves: start `milepost worker --pool gpu`"
    )
    assert found[0].fields == {"pool": "gpu", "commands": 1, "steps": ["start"]}


def test_a_live_embedded_driver_serves_every_pool() -> None:
    sim = Sim(playbook(ONE))
    driver = waiting.Driver("host:1:ab", NOW + 30, alive=True)
    (found,) = diagnose(sim, commands=queued(sim, "start", pool="gpu"), driver=driver)
    assert found.kind == dg.QUEUED and "in-process workers" in found.message


def test_a_run_whose_driver_stopped_says_to_resume_it() -> None:
    sim = Sim(playbook(ONE))
    for driver, why in (
        (waiting.Driver("host:1:ab", NOW - 5, alive=None), "its lease ended 5s ago"),
        (waiting.Driver("host:1:ab", NOW + 20, alive=False), "its process is gone"),
    ):
        found = diagnose(sim, commands=queued(sim, "start"), driver=driver)
        # no worker of any pool would take it: the run's own driver runs it, once resumed
        assert kinds(found) == [dg.NO_DRIVER, dg.QUEUED]
        assert found[1].message == (
            "step 'start' attempt 1 is queued: it runs once `milepost resume` drives the run again"
        )
        held = diagnose(
            sim, commands=claimed(sim, "start", worker="embedded:host:1:ab"), driver=driver
        )
        assert held[1].message == (
            "step 'start' attempt 1 was claimed by embedded:host:1:ab of "
            "the `milepost run` that stopped: `milepost resume` gives it "
            "back and runs it again"
        )
        assert found[0].message == (
            "no process drives this run: the `milepost run` that drove "
            f"it (host:1:ab) stopped, {why}; continue it with "
            "`milepost resume 77`"
        )


def test_an_approval_names_who_may_decide_the_votes_and_the_time_left() -> None:
    sim = Sim(
        playbook("""
    workflow:
      - step: refund
        tool: {kind: noop}
        spec:
          approval: {approvers: [user:alice, role:finance], quorum: 2, expires_in: 1h, risk: high}
    """),
        started_by="user:runner",
    )
    (approval,) = sim.state.approvals.values()
    (found,) = diagnose(sim)
    assert found.kind == dg.AWAITING_APPROVAL and found.step == "refund"
    assert found.message == (
        f"step 'refund' waits for approval {approval.approval_id} (0/2 "
        "approvals, risk high); who may decide: user:alice, role:finance "
        "(not user:runner, who started the run); it expires in 1h 00m"
    )
    assert found.fields["approvers"] == ["user:alice", "role:finance"]
    assert found.fields["expires_at"] == NOW + 3600 and found.fields["quorum"] == 2
    (late,) = diagnose(sim, now=NOW + 3610)  # past its expiry, before a tick recorded it
    assert late.message.endswith("; it expired 10s ago: the engine records that on its next look")


RETRIED = """
workflow:
  - step: flaky
    spec: {retry: {max_attempts: 3, backoff: fixed, delay: 30, retry_on: [exception]}}
    tool: {kind: python, code: "result = 1"}
"""


def test_a_pending_retry_timer_names_the_attempt_when_it_is_due_and_the_error() -> None:
    sim = Sim(playbook(RETRIED))
    sim.complete("flaky", error={"kind": "exception", "message": "ValueError: flaky"})
    (found,) = diagnose(sim, now=NOW + 10)
    assert found.kind == dg.RETRY_PENDING
    assert found.message == (
        "step 'flaky' retrying in 20s, attempt 2 of 3, after: ValueError: flaky"
    )
    assert found.fields["not_before_at"] == NOW + 30 and found.fields["attempt"] == 2
    assert found.fields["attempts"] == 3 and found.fields["retry"] == "spec.retry"
    sim.now = NOW + 30
    sim.fire()  # the retry is issued: its timer and its error are gone from the fold
    assert kinds(
        diagnose(sim, commands=queued(sim, "flaky"), live_pools=frozenset({"default"}))
    ) == [dg.QUEUED]
    assert sim.state.running["flaky"].retry_errors == {}


def test_a_loop_says_how_many_iterations_it_waits_for() -> None:
    sim = Sim(
        playbook("""
    workflow:
      - step: each
        loop: {in: [1, 2, 3], iterator: n, mode: sequential}
        tool: {kind: noop}
    """)
    )
    sim.complete("each", 10)
    found = diagnose(sim, commands=claimed(sim, "each"), live_pools=frozenset({"default"}))
    assert kinds(found) == [dg.LOOP_WAITING, dg.CLAIMED]
    assert found[0].message == (
        "loop step 'each' waits for 2 of 3 iteration(s): 1 done, 1 in "
        "flight, 0 retrying, 1 not started (max_in_flight 1)"
    )
    assert found[1].message.startswith("step 'each[1]' attempt 1 is claimed by worker-1")


def test_a_compensating_run_says_how_far_it_got() -> None:
    sim = Sim(
        playbook("""
    workflow:
      - step: charge
        tool: {kind: noop}
        spec: {compensation: refund}
        next: ship
      - step: ship
        tool: {kind: noop}
      - step: refund
        tool: {kind: noop}
        spec: {retry: {max_attempts: 2, delay: 5, retry_on: [server_error]}}
    """)
    )
    sim.complete("charge")
    sim.complete("ship", error={"kind": "exception", "message": "boom"})
    found = diagnose(sim, commands=claimed(sim, "refund"))
    assert kinds(found)[0] == dg.COMPENSATING
    assert found[0].message == (
        "the run is compensating before it ends FAILED: 0 of 1 compensation(s) done"
    )
    sim.complete("refund", error={"kind": "server_error", "message": "HTTP 503"})
    found = diagnose(sim)
    assert kinds(found) == [dg.COMPENSATING, dg.RETRY_PENDING]
    assert found[1].message == (
        "compensation 'refund' of step 'charge' retrying in 5s, attempt 2 of 2"
    )


def test_a_stall_window_nearly_used_is_named() -> None:
    sim = Sim(playbook("executor: {spec: {stall_after: 60s}}\n" + ONE))
    commands = claimed(sim, "start")
    assert kinds(diagnose(sim, commands=commands, last_progress_at=NOW - 10)) == [dg.CLAIMED]
    found = diagnose(sim, commands=commands, last_progress_at=NOW - 50)
    assert kinds(found) == [dg.CLAIMED, dg.STALL_NEAR]
    assert found[1].message == (
        "no progress for 50s of executor.spec.stall_after 60s: the run "
        "fails as stalled in 10s unless something moves it"
    )


def test_a_budget_nearly_spent_is_named() -> None:
    sim = Sim(playbook("executor: {spec: {budget: {tokens: 1000}}}\n" + BRANCHES))
    sim.state.usage.add([{"input_tokens": 850, "output_tokens": 0}])
    found = [f for f in diagnose(sim) if f.kind == dg.BUDGET_NEAR]
    assert [f.message for f in found] == [
        "tokens 850 of executor.spec.budget 1000 used (85%): past it the run fails at the next "
        "step boundary"
    ]
    assert found[0].fields == {"measure": "tokens", "used": 850, "budget": 1000}


def test_a_run_with_nothing_in_the_way_is_idle() -> None:
    pb: model.Playbook = playbook(ONE)
    state = st.ExecutionState(execution_id=5, pending={"start": {}})
    (found,) = dg.diagnose(state, pb, waiting.Facts(NOW))
    assert found.kind == dg.IDLE and found.fields == {"pending": ["start"]}
    assert found.message == (
        "nothing blocks it that the engine can see: its next decision is due (pending: start)"
    )


def test_findings_come_most_likely_cause_first() -> None:
    sim = Sim(
        playbook("""
    workflow:
      - step: start
        tool: {kind: noop}
        next: {spec: {mode: inclusive}, arcs: [{step: each}, {step: train}]}
      - step: each
        loop: {in: [1, 2], iterator: n}
        tool: {kind: noop}
      - step: train
        spec: {pool: gpu}
        tool: {kind: noop}
    """)
    )
    sim.complete("start")
    commands = {**claimed(sim, "each"), **queued(sim, "train", pool="gpu")}
    found = diagnose(sim, commands=commands, live_pools=frozenset({"default"}))
    assert kinds(found) == [dg.NO_LIVE_WORKER, dg.LOOP_WAITING, dg.CLAIMED]
    assert set(dg.ORDER) >= {f.kind for f in found}


def test_a_playbook_step_names_the_child_run_it_waits_for() -> None:
    sim = Sim(
        playbook("""
    workflow:
      - step: sub
        tool: {kind: playbook, path: tests/child}
    """)
    )
    (cmd,) = sim.live("sub")
    found = diagnose(
        sim,
        commands=claimed(sim, "sub"),
        children=(waiting.Child(900, "tests/child", cmd.command_id),),
    )
    assert kinds(found) == [dg.CHILD_RUNNING, dg.CLAIMED]
    assert found[0].step == "sub" and found[0].fields == {
        "child_execution_id": "900",
        "path": "tests/child",
    }
    assert found[0].message == (
        "step 'sub' waits for its child execution 900 (tests/child), "
        "still running: `milepost doctor 900` says why"
    )


def test_the_command_statuses_are_the_command_tables() -> None:
    assert (waiting.QUEUED_STATUS, waiting.CLAIMED_STATUS) == (
        port.COMMAND_QUEUED,
        port.COMMAND_CLAIMED,
    )
