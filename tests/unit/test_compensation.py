"""Compensation in the pure core (DSL 10.5): events in, decisions out."""

from __future__ import annotations

from typing import Any

from milepost.core import cancellation, work
from milepost.core import compensation_state as cs
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.engine import summaries
from milepost.store import projection
from tests.unit.sim import Sim, playbook

# charge -> reserve (a loop) -> ship; charge and reserve have compensations, ship fails
SAGA = """
workflow:
  - step: start
    tool: {kind: noop}
    spec: {compensation: undo_start}
    next: charge
  - step: charge
    tool: {kind: noop}
    spec: {compensation: refund}
    next: reserve
  - step: reserve
    loop: {in: "{{ workload.skus }}", iterator: sku}
    tool: {kind: noop}
    spec: {compensation: release}
    next: ship
  - step: ship
    tool: {kind: noop}
  - step: undo_start
    tool: {kind: noop}
  - step: refund
    tool: {kind: noop}
    next: ship
  - step: release
    tool: {kind: noop}
    spec: {retry: {max_attempts: 2, delay: 5, retry_on: [server_error]}}
"""

BOOM = {"kind": "exception", "message": "boom"}


def _to_ship(sim: Sim) -> None:
    sim.complete("start", {"ok": 1})
    sim.complete("charge", {"charge_id": "ch_1"})
    sim.complete("reserve", "a")
    sim.complete("reserve", "b")


def _failed_at_ship() -> Sim:
    sim = Sim(playbook(SAGA), workload={"skus": ["x", "y"]})
    _to_ship(sim)
    sim.complete("ship", error=BOOM)
    return sim


def test_a_failed_run_compensates_newest_first_one_at_a_time_then_fails() -> None:
    sim = _failed_at_ship()
    started = [e for e in sim.log if e.event_type == ev.COMPENSATION_STARTED]
    assert len(started) == 1
    assert started[0].payload["outcome"] == st.FAILED
    assert [(i["step"], i["compensation"]) for i in started[0].payload["plan"]] == [
        ("reserve", "release"),
        ("charge", "refund"),
        ("start", "undo_start"),
    ]
    order = []
    while sim.live():
        (cmd,) = sim.live()  # one at a time
        order.append(cmd.step)
        assert not sim.state.terminal and cs.compensating(sim.state)
        sim.report(cmd, {"undone": cmd.step})
    assert order == ["release", "refund", "undo_start"]
    assert sim.state.status == st.FAILED
    assert sim.state.error is not None and sim.state.error["step"] == "ship"
    outcomes = [(e.event_type, e.step) for e in sim.log if e.event_type.startswith("compensation.")]
    assert outcomes[1:] == [
        (ev.COMPENSATION_COMPLETED, "release"),
        (ev.COMPENSATION_COMPLETED, "refund"),
        (ev.COMPENSATION_COMPLETED, "undo_start"),
    ]
    assert sim.log[-1].event_type == ev.EXECUTION_FAILED
    # the compensation's `next` is ignored: refund's arc to ship never ran it again
    assert sim.state.run_counts["ship"] == 1


def test_the_compensation_context_holds_the_step_run_and_its_result() -> None:
    sim = _failed_at_ship()
    pb = sim.pb
    contexts = []
    while sim.live():
        (cmd,) = sim.live()
        contexts.append(work.work_item(sim.state, pb, cmd).context["compensation"])
        sim.report(cmd, {})
    assert contexts == [
        {"step": "reserve", "run": 1, "result": ["a", "b"]},  # a loop counts once
        {"step": "charge", "run": 1, "result": {"charge_id": "ch_1"}},
        {"step": "start", "run": 1, "result": {"ok": 1}},
    ]
    # no other command gets one
    assert cs.context_of(sim.state, 123456) is None


def test_a_failing_compensation_is_recorded_and_the_others_still_run() -> None:
    sim = _failed_at_ship()
    sim.complete("release", error={"kind": "exception", "message": "no stock api"})
    assert [c.step for c in sim.live()] == ["refund"]
    sim.run_all()
    failed = [e for e in sim.log if e.event_type == ev.COMPENSATION_FAILED]
    assert len(failed) == 1 and failed[0].step == "release"
    assert failed[0].payload["error"]["reason"] == (
        "compensation 'release' of step 'reserve' failed: no stock api"
    )
    assert sim.state.status == st.FAILED
    assert sim.state.error is not None and sim.state.error["message"] == "boom"
    summary = summaries.execution_summary(sim.state)
    assert summary["compensating"] is False
    assert [(i["compensation"], i["status"]) for i in summary["compensation"]["items"]] == [
        ("release", cs.FAILED),
        ("refund", cs.COMPLETED),
        ("undo_start", cs.COMPLETED),
    ]


def test_a_compensation_is_retried_under_its_own_spec_retry() -> None:
    sim = _failed_at_ship()
    first = sim.live()[0]
    sim.report(first, error={"kind": "server_error", "message": "503"})
    assert sim.live() == [] and sim.wake_at == sim.now + 5
    assert not sim.state.terminal
    sim.fire()
    (again,) = sim.live()
    assert (again.step, again.attempt) == ("release", 2)
    assert again.idempotency_key != first.idempotency_key
    sim.report(again, error={"kind": "server_error", "message": "503"})  # attempts used up
    assert [c.step for c in sim.live()] == ["refund"]


def test_a_lost_compensation_is_issued_again() -> None:
    sim = _failed_at_ship()
    sim.complete("release", {})
    first = sim.live()[0]
    sim.lose(first)  # refund has no spec.retry: a lost worker still gets the lost attempts
    (again,) = sim.live()
    assert (again.step, again.run, again.attempt) == ("refund", 1, 2)


def test_a_completed_run_never_compensates() -> None:
    sim = Sim(playbook(SAGA), workload={"skus": ["x"]})
    sim.run_all()
    assert sim.state.status == st.COMPLETED
    assert not any(e.event_type.startswith("compensation.") for e in sim.log)


def test_a_run_with_nothing_to_undo_ends_at_once() -> None:
    sim = Sim(playbook(SAGA), workload={"skus": ["x"]})
    sim.complete("start", error=BOOM)
    assert sim.state.status == st.FAILED
    assert not any(e.event_type.startswith("compensation.") for e in sim.log)
    assert summaries.execution_summary(sim.state)["compensating"] is False
    assert "compensation" not in summaries.execution_summary(sim.state)


def test_a_cancelled_run_compensates_after_its_attempts_finish_then_ends_cancelled() -> None:
    sim = Sim(playbook(SAGA), workload={"skus": ["x", "y"]})
    sim.complete("start", {})
    sim.complete("charge", {"charge_id": "ch_2"})
    sim.cancel()
    assert not any(e.event_type == ev.COMPENSATION_STARTED for e in sim.log)  # reserve runs
    sim.run_all()  # the loop's attempts finish; nothing new is issued for them
    started = [e for e in sim.log if e.event_type == ev.COMPENSATION_STARTED]
    assert started[0].payload["outcome"] == st.CANCELLED
    assert [i["compensation"] for i in started[0].payload["plan"]] == ["refund", "undo_start"]
    assert sim.state.status == st.CANCELLED
    assert sim.log[-1].event_type == ev.EXECUTION_CANCELLED


def test_a_cancel_asked_while_compensating_changes_neither_the_work_nor_the_end() -> None:
    sim = _failed_at_ship()
    sim.cancel()
    assert [c.step for c in sim.live()] == ["release"]
    assert not cancellation.cancel_stops_work(sim.state)
    sim.run_all()
    assert sim.state.status == st.FAILED


def test_a_compensation_step_that_undoes_two_runs_gets_a_run_and_key_each() -> None:
    pb = playbook("""
        workflow:
          - step: start
            tool: {kind: noop}
            spec: {compensation: undo}
            next: [{step: start, when: "{{ start.n < 2 }}"}, {step: bad, when: "{{ start.n >= 2 }}"}]
          - step: bad
            tool: {kind: noop}
          - step: undo
            tool: {kind: noop}
        """)
    sim = Sim(pb)
    sim.complete("start", {"n": 1})
    sim.complete("start", {"n": 2})
    sim.complete("bad", error=BOOM)
    seen = []
    while sim.live():
        (cmd,) = sim.live()
        seen.append(
            (
                cmd.run,
                cmd.idempotency_key,
                work.work_item(sim.state, pb, cmd).context["compensation"],
            )
        )
        sim.report(cmd, {})
    assert [(r, c) for r, _, c in seen] == [
        (1, {"step": "start", "run": 2, "result": {"n": 2}}),
        (2, {"step": "start", "run": 1, "result": {"n": 1}}),
    ]
    assert seen[0][1] != seen[1][1]


def test_a_fold_resumed_from_any_point_of_compensating_runs_no_compensation_twice() -> None:
    """A crash after any event from the failure on: the log folded again decides the
    rest, and never issues a first attempt of a compensation that was issued already."""
    sim = _failed_at_ship()
    sim.report(sim.live()[0], {"r": 1})
    sim.report(sim.live()[0], error={"kind": "exception", "message": "x"})
    sim.run_all()
    full = sim.log
    failed_at = next(i for i, e in enumerate(full) if e.event_type == ev.COMMAND_FAILED)
    for cut in range(failed_at + 1, len(full) + 1):
        resumed = Sim.__new__(Sim)
        resumed.pb, resumed.now, resumed.log = sim.pb, sim.now, list(full[:cut])
        resumed._ids = iter(range(10_000, 20_000))  # type: ignore[assignment]
        resumed.state = fl.fold(None, resumed.log)
        resumed.settle()
        resumed.run_all()
        first_attempts = [
            int(e.payload["compensation"])
            for e in resumed.log
            if e.event_type == ev.COMMAND_ISSUED
            and "compensation" in e.payload
            and e.payload["attempt"] == 1
        ]
        assert first_attempts == [0, 1, 2], (cut, first_attempts)
        ends = [e.event_type for e in resumed.log if e.event_type.startswith("compensation.")]
        assert len(ends) == 4, (cut, ends)
        assert resumed.state.status == st.FAILED


def test_the_projection_takes_claims_again_once_compensating_starts() -> None:
    sim = Sim(playbook(SAGA), workload={"skus": ["x"]})
    sim.complete("start", {})
    sim.cancel()
    sim.complete("charge", {})  # the attempt in flight finished: compensating starts
    assert [c.step for c in sim.live()] == ["refund"]
    change = projection.changes(sim.log)
    assert change.cancels == [77] and change.finishing == [77]
    # a cancel asked while compensating is marked: it does not stop the claims again
    again = ev.new_event(99_999, 77, ev.EXECUTION_CANCEL_REQUESTED, sim.now)
    marked = fl.fold_reports(sim.state, [again])
    assert marked[0].meta.get("compensating") is True
    assert projection.changes(marked).cancels == []
    assert projection.changes([again]).cancels == [77]


def _payloads(sim: Sim, event_type: str) -> list[dict[str, Any]]:
    return [e.payload for e in sim.log if e.event_type == event_type]


def test_runs_without_compensations_write_the_same_events_as_before() -> None:
    sim = Sim(
        playbook("""
        workflow:
          - step: start
            tool: {kind: noop}
        """),
        workload={},
    )
    sim.complete("start", error=BOOM)
    assert [t for t, _ in sim.types(sim.log)] == [
        ev.EXECUTION_STARTED,
        ev.STEP_ENTER,
        ev.COMMAND_ISSUED,
        ev.COMMAND_FAILED,
        ev.STEP_EXIT,
        ev.EXECUTION_FAILED,
    ]
    assert "compensation" not in _payloads(sim, ev.COMMAND_ISSUED)[0]


def test_a_compensation_goes_to_its_own_steps_pool() -> None:
    """Its `spec` applies (DSL 10.5), `spec.pool` included (DSL 10.6): the compensation's
    command was issued to the default pool when both branches met."""
    sim = Sim(
        playbook(
            SAGA.replace(
                "  - step: refund\n    tool: {kind: noop}",
                "  - step: refund\n    tool: {kind: noop}\n    spec: {pool: payments}",
            )
        ),
        workload={"skus": ["x", "y"]},
    )
    _to_ship(sim)
    sim.complete("ship", error=BOOM)
    sim.complete("release")  # the loop step counts once
    issued = [e for e in sim.log if e.event_type == ev.COMMAND_ISSUED and e.step == "refund"]
    assert [e.payload.get("pool") for e in issued] == ["payments"]


LONG = """
workflow:
  - step: start
    tool: {kind: noop}
    next: tick
  - step: tick
    tool: {kind: noop}
    next: [{step: tick, when: "{{ ctx.n | default(0) < 5 }}"}, {step: pay, when: "{{ ctx.n | default(0) >= 5 }}"}]
    set: {ctx.n: "{{ ctx.n | default(0) + 1 }}"}
  - step: pay
    tool: {kind: noop}
    spec: {compensation: refund}
  - step: refund
    tool: {kind: noop}
"""


def test_only_the_runs_of_steps_naming_a_compensation_keep_their_result() -> None:
    """A long run of steps without compensations keeps no per-run results in its state."""
    sim = Sim(playbook(LONG))
    sim.run_all()
    assert sim.state.status == st.COMPLETED
    assert sim.state.run_counts["tick"] == 5
    assert list(sim.state.run_results) == [("pay", 1)]
    exits = [e for e in sim.log if e.event_type == ev.STEP_EXIT]
    assert {e.step: e.payload["compensable"] for e in exits} == {
        "start": False,
        "tick": False,
        "pay": True,
    }
    # an older log's exits do not say: every run's result is kept, as it was
    older = [
        ev.new_event(
            e.event_id,
            e.execution_id,
            e.event_type,
            e.created_at,
            step=e.step,
            status=e.status,
            payload={k: v for k, v in e.payload.items() if k != "compensable"},
        )
        if e.event_type == ev.STEP_EXIT
        else e
        for e in sim.log
    ]
    assert len(fl.fold(None, older).run_results) == 7
