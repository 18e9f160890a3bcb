"""Teardown in the pure core (`executor.spec.teardown`, docs/language.md): events in,
decisions out. The property test at the end drives generated playbooks to every kind of
end and checks the class: each teardown step runs once, after the compensations, and the
run ends as it would have without teardown."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from milepost.cli.progress import Progress
from milepost.core import cancellation, teardown, work
from milepost.core import diagnosis as dg
from milepost.core import events as ev
from milepost.core import final_step_state as fs
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core import teardown_state as td
from milepost.engine import describe, run_graph, snapshots, summaries
from milepost.errors import PlaybookInvalid
from milepost.playbook import model
from milepost.store import projection
from tests.unit.sim import Sim, playbook

# start -> ship; start has a compensation; cleanup then notify tear down whatever happens
SHOP = """
executor: {spec: {teardown: [cleanup, notify]}}
workflow:
  - step: start
    tool: {kind: noop}
    spec: {compensation: refund}
    next: ship
  - step: ship
    tool: {kind: noop}
  - step: refund
    tool: {kind: noop}
  - step: cleanup
    tool: {kind: noop}
    spec: {retry: {max_attempts: 2, delay: 5, retry_on: [server_error]}}
  - step: notify
    tool: {kind: noop}
"""

BOOM = {"kind": "exception", "message": "boom"}


def _torn(sim: Sim) -> list[tuple[str, str | None]]:
    return [
        (e.event_type, e.step)
        for e in sim.log
        if e.event_type.startswith(("teardown.", "compensation.", "execution."))
        and e.event_type != ev.EXECUTION_STARTED
    ]


def test_a_completed_run_tears_down_in_order_then_completes() -> None:
    sim = Sim(playbook(SHOP))
    sim.complete("start", {"id": 1})
    sim.complete("ship", {})
    order = []
    while sim.live():
        (cmd,) = sim.live()  # one at a time
        order.append(cmd.step)
        assert not sim.state.terminal and td.tearing_down(sim.state)
        assert work.work_item(sim.state, sim.pb, cmd).context["teardown"] == {
            "status": st.COMPLETED,
            "error": None,
        }
        sim.report(cmd, {"done": cmd.step})
    assert order == ["cleanup", "notify"]
    assert _torn(sim) == [
        (ev.TEARDOWN_STARTED, None),
        (ev.TEARDOWN_COMPLETED, "cleanup"),
        (ev.TEARDOWN_COMPLETED, "notify"),
        (ev.EXECUTION_COMPLETED, None),
    ]
    assert sim.state.status == st.COMPLETED
    assert sim.log[-1].payload["teardown"] == [
        {"step": "cleanup", "status": "COMPLETED", "error": None},
        {"step": "notify", "status": "COMPLETED", "error": None},
    ]
    # a teardown step's outcome is its step's status and result
    assert sim.state.step_status["notify"] == st.COMPLETED
    assert sim.state.results["notify"] == {"done": "notify"}


def test_a_failed_run_compensates_then_tears_down_then_fails_with_its_own_error() -> None:
    sim = Sim(playbook(SHOP))
    sim.complete("start", {"id": 1})
    sim.complete("ship", error=BOOM)
    sim.run_all()
    assert _torn(sim) == [
        (ev.COMPENSATION_STARTED, None),
        (ev.COMPENSATION_COMPLETED, "refund"),
        (ev.TEARDOWN_STARTED, None),
        (ev.TEARDOWN_COMPLETED, "cleanup"),
        (ev.TEARDOWN_COMPLETED, "notify"),
        (ev.EXECUTION_FAILED, None),
    ]
    started = next(e for e in sim.log if e.event_type == ev.TEARDOWN_STARTED)
    assert started.payload["outcome"] == st.FAILED
    assert started.payload["error"]["step"] == "ship"
    assert sim.state.status == st.FAILED
    assert sim.state.error is not None and sim.state.error["message"] == "boom"


def test_the_teardown_context_names_a_failed_runs_status_and_error() -> None:
    sim = Sim(playbook(SHOP))
    sim.complete("start", error=BOOM)
    (cmd,) = sim.live()
    seen = work.work_item(sim.state, sim.pb, cmd).context["teardown"]
    assert seen["status"] == st.FAILED and seen["error"]["reason"] == "step 'start' failed: boom"
    assert td.context_of(sim.state, 123456) is None  # no other command gets one


def test_a_failing_teardown_step_is_recorded_the_next_runs_and_the_status_stays() -> None:
    sim = Sim(playbook(SHOP))
    sim.complete("start", {})
    sim.complete("ship", {})
    sim.complete("cleanup", error={"kind": "exception", "message": "disk busy"})
    assert [c.step for c in sim.live()] == ["notify"]
    sim.run_all()
    assert sim.state.status == st.COMPLETED and sim.state.error is None
    failed = [e for e in sim.log if e.event_type == ev.TEARDOWN_FAILED]
    assert [e.step for e in failed] == ["cleanup"]
    assert failed[0].payload["error"]["reason"] == "teardown step 'cleanup' failed: disk busy"
    assert sim.state.step_status["cleanup"] == st.FAILED
    summary = summaries.execution_summary(sim.state)
    assert summary["status"] == st.COMPLETED and summary["tearing_down"] is False
    assert summary["steps"]["cleanup"]["status"] == st.FAILED
    assert [(i["step"], i["status"]) for i in summary["teardown"]["items"]] == [
        ("cleanup", fs.FAILED),
        ("notify", fs.COMPLETED),
    ]
    assert sim.log[-1].payload["teardown"][0]["error"]["message"] == "disk busy"


def test_a_teardown_step_is_retried_under_its_own_spec_retry_and_a_lost_one_again() -> None:
    sim = Sim(playbook(SHOP))
    sim.complete("start", {})
    sim.complete("ship", {})
    first = sim.live()[0]
    sim.report(first, error={"kind": "server_error", "message": "503"})
    assert sim.live() == [] and sim.wake_at == sim.now + 5
    sim.fire()
    (again,) = sim.live()
    assert (again.step, again.attempt) == ("cleanup", 2)
    assert again.idempotency_key != first.idempotency_key
    sim.report(again, {})
    (notify,) = sim.live()
    sim.lose(notify)  # no spec.retry: a lost worker still gets the lost attempts
    (notify_again,) = sim.live()
    assert (notify_again.step, notify_again.attempt) == ("notify", 2)
    sim.run_all()
    assert sim.state.status == st.COMPLETED


def test_a_cancel_asked_while_tearing_down_stops_nothing() -> None:
    sim = Sim(playbook(SHOP))
    sim.complete("start", {})
    sim.complete("ship", {})
    sim.cancel()
    assert not cancellation.cancel_stops_work(sim.state)
    assert cancellation.deadline(sim.state, sim.pb) is None  # the grace does not reach it
    assert sim.wake_at is None
    assert [c.step for c in sim.live()] == ["cleanup"]
    sim.run_all()
    assert sim.state.status == st.COMPLETED
    # marked, so the store keeps taking its claims
    again = ev.new_event(99_999, 77, ev.EXECUTION_CANCEL_REQUESTED, sim.now)
    fresh = fl.fold(None, sim.log[: next(i for i, e in enumerate(sim.log) if e.step == "notify")])
    assert fl.fold_reports(fresh, [again])[0].meta.get("tearing_down") is True


def test_a_cancelled_run_tears_down_once_its_attempts_are_abandoned() -> None:
    sim = Sim(playbook(SHOP))
    sim.complete("start", {})
    sim.cancel()  # ship's attempt is out and never reports
    assert sim.wake_at is not None
    sim.fire()  # the grace ended: abandoned, then compensated and torn down
    sim.complete("refund", {})
    started = next(e for e in sim.log if e.event_type == ev.TEARDOWN_STARTED)
    assert started.payload == {
        "outcome": st.CANCELLED,
        "error": None,
        "steps": [{"step": "cleanup", "run": 1}, {"step": "notify", "run": 1}],
    }
    sim.run_all()
    assert sim.state.status == st.CANCELLED
    assert sim.log[-1].event_type == ev.EXECUTION_CANCELLED


def test_the_projection_takes_claims_again_once_tearing_down_starts() -> None:
    sim = Sim(playbook(SHOP.replace("spec: {compensation: refund}", "")))
    sim.complete("start", {})
    sim.cancel()
    sim.complete("ship", {})  # the attempt in flight finished: tearing down starts
    change = projection.changes(sim.log)
    assert change.cancels == [77] and change.finishing == [77]


def test_a_dead_end_failure_tears_down_and_fails() -> None:
    pb = playbook("""
        executor: {spec: {no_next_is_error: true, teardown: cleanup}}
        workflow:
          - step: start
            tool: {kind: noop}
            next: [{step: start, when: "{{ false }}"}]
          - step: cleanup
            tool: {kind: noop}
        """)
    sim = Sim(pb)
    sim.complete("start", {})
    (cmd,) = sim.live()
    assert work.work_item(sim.state, pb, cmd).context["teardown"]["error"]["kind"] == "dead_end"
    sim.run_all()
    assert sim.state.status == st.FAILED and sim.state.error is not None
    assert sim.state.error["kind"] == "dead_end"


def test_a_stalled_or_over_budget_run_tears_down() -> None:
    for failure in (ev.EXECUTION_STALLED, ev.BUDGET_EXCEEDED):
        sim = Sim(playbook(SHOP))
        sim.fold_and_settle(failure, None, error={"kind": "stalled", "message": "quiet"})
        sim.complete("start", {})  # what runs finishes, then it ends as a failed step ends it
        sim.run_all()
        assert sim.state.status == st.FAILED, failure
        assert [e for e, _ in _torn(sim)][-4:] == [
            ev.TEARDOWN_STARTED,
            ev.TEARDOWN_COMPLETED,
            ev.TEARDOWN_COMPLETED,
            ev.EXECUTION_FAILED,
        ]


ENGINE = {"step": None, "task": None, "kind": "engine", "message": "bug", "reason": "engine: bug"}


def test_after_an_engine_error_live_commands_are_settled_and_teardown_starts() -> None:
    sim = Sim(playbook(SHOP))
    sim.complete("start", {})
    (ship,) = sim.live()
    events = teardown.after_engine_error(sim.state, sim.pb, ENGINE, sim.now, sim.new_id, {})
    assert [(e.event_type, e.step) for e in events] == [
        (ev.COMMAND_FAILED, "ship"),
        (ev.TEARDOWN_STARTED, None),
    ]
    assert events[0].payload["command_id"] == ship.command_id
    assert events[1].payload["outcome"] == st.FAILED and events[1].payload["error"] == ENGINE
    fl.fold(sim.state, events)
    sim.log.extend(events)
    sim.settle()
    assert [c.step for c in sim.live()] == ["cleanup"]  # the workflow decides nothing more
    sim.run_all()
    assert sim.state.status == st.FAILED and sim.state.error == ENGINE


def test_an_engine_error_while_tearing_down_ends_with_the_status_decided() -> None:
    sim = Sim(playbook(SHOP))
    sim.complete("start", {})
    sim.complete("ship", {})
    sim.complete("cleanup", {})
    events = teardown.after_engine_error(sim.state, sim.pb, ENGINE, sim.now, sim.new_id, {})
    assert [e.event_type for e in events] == [ev.EXECUTION_COMPLETED]
    assert events[0].payload["teardown"] == [
        {"step": "cleanup", "status": "COMPLETED", "error": None},
        {"step": "notify", "status": "FAILED", "error": ENGINE},
    ]
    fl.fold(sim.state, events)
    assert sim.state.status == st.COMPLETED and sim.state.commands == {}


def test_a_playbook_without_teardown_writes_the_same_events_as_before() -> None:
    sim = Sim(playbook(SHOP.replace("executor: {spec: {teardown: [cleanup, notify]}}", "")))
    sim.complete("start", {})
    sim.complete("ship", {})
    assert sim.log[-1].event_type == ev.EXECUTION_COMPLETED and sim.log[-1].payload == {}
    assert not any(e.event_type.startswith("teardown.") for e in sim.log)
    assert teardown.after_engine_error(sim.state, sim.pb, ENGINE, sim.now, sim.new_id, {}) == []


def test_a_fold_resumed_from_any_point_of_tearing_down_runs_no_step_twice() -> None:
    """A crash after any event from the end of the steps on: the log folded again (and
    its snapshot) decides the rest and never issues a first attempt twice."""
    sim = Sim(playbook(SHOP))
    sim.complete("start", {})
    sim.complete("ship", {})
    sim.complete("cleanup", error={"kind": "exception", "message": "x"})
    sim.run_all()
    full = sim.log
    ended = next(i for i, e in enumerate(full) if e.step == "ship" and e.event_type == ev.STEP_EXIT)
    for cut in range(ended, len(full) + 1):
        for rebuilt in (fl.fold(None, full[:cut]), _snapshot(fl.fold(None, full[:cut]))):
            resumed = _resumed(sim, full[:cut], rebuilt)
            resumed.run_all()
            firsts = [
                e.step
                for e in resumed.log
                if e.event_type == ev.COMMAND_ISSUED and "teardown" in e.payload
            ]
            assert firsts == ["cleanup", "notify"], (cut, firsts)
            assert resumed.state.status == st.COMPLETED


def _snapshot(state: st.ExecutionState) -> st.ExecutionState:
    loaded = snapshots.load(snapshots.dump(state), state.execution_id)
    assert loaded is not None
    return loaded


def _resumed(sim: Sim, log: list[ev.Event], state: st.ExecutionState) -> Sim:
    resumed = Sim.__new__(Sim)
    resumed.pb, resumed.now, resumed.log = sim.pb, sim.now, list(log)
    resumed._ids = itertools.count(10_000)  # type: ignore[assignment]
    resumed.state = state
    resumed.settle()
    return resumed


def test_doctor_describe_and_the_graph_show_teardown() -> None:
    sim = Sim(playbook(SHOP))
    sim.complete("start", {})
    sim.complete("ship", {})
    sim.now += 2
    sim.complete("cleanup", error={"kind": "exception", "message": "disk busy"})
    found = dg.diagnose(sim.state, sim.pb, dg.Facts(sim.now))
    assert found[0].kind == dg.TEARING_DOWN
    assert (
        found[0].message
        == "the run is tearing down before it ends COMPLETED: 1 of 2 teardown step(s) done"
    )
    sim.now += 1
    sim.run_all()
    ended = dg.diagnose(sim.state, sim.pb, dg.Facts(sim.now))
    assert [f.kind for f in ended] == [dg.COMPLETED, dg.TEARDOWN_FAILED]
    assert ended[1].step == "cleanup" and "disk busy" in ended[1].message
    shown = describe.view(sim.state, sim.pb, sim.log)
    cleanup = shown["steps"]["cleanup"]
    assert cleanup["status"] == st.FAILED and cleanup["error"]["message"] == "disk busy"
    assert [a["status"] for a in cleanup["attempts"]] == ["FAILED"]
    assert cleanup["duration_s"] == 2.0  # from its first command to its outcome
    assert shown["steps"]["notify"]["status"] == st.COMPLETED
    assert shown["teardown"]["status"] == st.COMPLETED
    nodes = {n["id"]: n for n in run_graph.run_graph(sim.state, sim.pb)["nodes"]}
    assert (nodes["cleanup"]["teardown"], nodes["cleanup"]["status"]) == (True, st.FAILED)
    assert (nodes["ship"]["teardown"], nodes["notify"]["status"]) == (False, st.COMPLETED)


def test_the_live_progress_table_shows_teardown_steps_run_and_end() -> None:
    sim = Sim(playbook(SHOP))
    sim.complete("start", {})
    sim.complete("ship", {})
    sim.complete("cleanup", error={"kind": "server_error", "message": "503"})
    sim.fire()
    shown = Progress()
    for event in sim.log:
        shown(event)
    assert (shown.rows["cleanup"]["status"], shown.rows["cleanup"]["runs"]) == ("RUNNING", 1)
    sim.complete("cleanup", error={"kind": "server_error", "message": "503"})
    sim.run_all()
    shown = Progress()
    for event in sim.log:
        shown(event)
    assert shown.rows["cleanup"] == {"status": "FAILED", "runs": 1, "done": 0, "total": None}
    assert shown.rows["notify"]["status"] == "COMPLETED"


def test_a_teardown_steps_input_renders_with_the_runs_status() -> None:
    pb = playbook("""
        executor: {spec: {teardown: tidy}}
        workflow:
          - step: start
            tool: {kind: noop}
          - step: tidy
            tool: {kind: python, input: {s: "{{ teardown.status }}"}, code: "result = s"}
        """)
    sim = Sim(pb)
    sim.complete("start", error=BOOM)
    assert describe.step_input(sim.state, pb, "tidy") == {"s": st.FAILED}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("teardown: [nope]", "executor.spec.teardown[0]: unknown step 'nope'"),
        (
            "teardown: [start]",
            "executor.spec.teardown[0]: step 'start' is reachable through arcs from the entry",
        ),
        ("teardown: [tidy, tidy]", "executor.spec.teardown[1]: step 'tidy' is listed twice"),
        (
            "teardown: [undo]",
            "executor.spec.teardown[0]: step 'undo' is the compensation of step 'start'",
        ),
        ("teardown: [start2]", "step 'start2' has a spec.compensation"),
        ("teardown: {a: 1}", "executor.spec.teardown: expected a step name or a list"),
        ("teardown: [looped]", "step 'looped': loop: a teardown step runs once"),
        ("teardown: [gated]", "step 'gated': spec.approval: a teardown step cannot wait"),
    ],
)
def test_a_bad_teardown_is_refused_naming_the_field_and_the_step(body: str, fragment: str) -> None:
    text = f"""
        executor: {{spec: {{{body}}}}}
        workflow:
          - step: start
            tool: {{kind: noop}}
            spec: {{compensation: undo}}
          - step: undo
            tool: {{kind: noop}}
          - step: tidy
            tool: {{kind: noop}}
          - step: start2
            tool: {{kind: noop}}
            spec: {{compensation: undo}}
          - step: looped
            loop: {{in: [1], iterator: i}}
            tool: {{kind: noop}}
          - step: gated
            tool: {{kind: noop}}
            spec: {{approval: {{approvers: ["user:a"]}}}}
        """
    with pytest.raises(PlaybookInvalid) as caught:
        playbook(text)
    assert any(fragment in p for p in caught.value.problems), caught.value.problems


def test_teardown_takes_one_name_and_warns_of_what_it_ignores() -> None:
    pb = playbook("""
        executor: {spec: {teardown: tidy}}
        workflow:
          - step: start
            tool: {kind: noop}
          - step: tidy
            tool: {kind: noop}
            set: {ctx.x: 1}
            next: start
        """)
    assert pb.executor.teardown == ("tidy",)
    assert sorted(pb.warnings) == [
        "step 'tidy': next: ignored: a teardown step's arcs are never followed (line 12)",
        "step 'tidy': set: ignored: a teardown step writes no ctx (line 11)",
    ]


def test_a_root_finally_points_at_executor_spec_teardown() -> None:
    with pytest.raises(PlaybookInvalid) as caught:
        playbook("finally: [tidy]\nworkflow:\n  - step: start\n    tool: {kind: noop}\n")
    assert caught.value.problems == [
        "`finally:` is written `executor.spec.teardown: [<step>, ...]`, with milepost's other "
        "extensions (the root keys are NoETL's) (line 4)"
    ]


# -- the class: every way a run ends ------------------------------------------------------------

OUTCOMES = ("ok", "exception", "server_error", "lost", "stopped")
"""How an attempt of a compensation or teardown step ends: `stopped` is a worker that
stopped it (kind `cancelled`), `lost` its worker gone (the lease expired)."""


def _shape(steps: int, compensated: list[bool], torn: int, retried: list[bool]) -> str:
    lines = [f"executor: {{spec: {{teardown: [{', '.join(f't{i}' for i in range(torn))}]}}}}"]
    lines.append("workflow:")
    for i in range(steps):
        lines += [f"  - step: s{i}", "    tool: {kind: noop}"]
        if compensated[i]:
            lines.append(f"    spec: {{compensation: u{i}}}")
        if i + 1 < steps:
            lines.append(f"    next: s{i + 1}")
    for i in range(steps):
        if compensated[i]:
            lines += [f"  - step: u{i}", "    tool: {kind: noop}"]
    for i in range(torn):
        lines += [f"  - step: t{i}", "    tool: {kind: noop}"]
        if retried[i]:
            lines.append("    spec: {retry: {max_attempts: 2, delay: 3, retry_on: [server_error]}}")
    return "\n".join(lines) + "\n"


@hs.composite
def scenarios(draw: hs.DrawFn) -> dict[str, Any]:
    steps = draw(hs.integers(1, 3))
    torn = draw(hs.integers(1, 3))
    body = _shape(
        steps,
        draw(hs.lists(hs.booleans(), min_size=steps, max_size=steps)),
        torn,
        draw(hs.lists(hs.booleans(), min_size=torn, max_size=torn)),
    )
    moment = hs.none() | hs.integers(0, 14)
    return {
        "body": body,
        "fail_at": draw(hs.none() | hs.integers(0, steps - 1)),
        "cancel_at": draw(moment),  # after this many reports: in the steps, compensating, ...
        "engine_error_at": draw(moment),
        "crashes": draw(hs.sets(hs.integers(0, 14), max_size=3)),
        "final": draw(hs.lists(hs.sampled_from(OUTCOMES), max_size=12)),
    }


def _drive(pb: model.Playbook, sc: dict[str, Any]) -> Sim:
    """Run a scenario to its end: workflow steps complete (or fail at `fail_at`), final
    steps' attempts end as `final` says (then complete), a cancel and an engine error come
    after as many reports as said, and the state is rebuilt (from the log, or its
    snapshot) at each of `crashes`."""
    sim = Sim(pb)
    final = iter(sc["final"])
    reports = 0
    for _ in range(200):
        if sim.state.terminal:
            return sim
        if reports == sc["cancel_at"] and not sim.state.cancel_requested:
            sim.cancel()
        if reports == sc["engine_error_at"]:
            sc = {**sc, "engine_error_at": None}
            _engine_error(sim)
            continue
        if reports in sc["crashes"]:
            sc = {**sc, "crashes": sc["crashes"] - {reports}}
            rebuilt = fl.fold(None, sim.log)
            sim.state = _snapshot(rebuilt) if reports % 2 else rebuilt
            sim.settle()
            continue
        live = sim.live()
        if not live:
            assert sim.wake_at is not None, "a run that waits for nothing"
            sim.fire()
            continue
        cmd = live[0]
        reports += 1
        if cmd.step.startswith("s"):
            failed = cmd.step == f"s{sc['fail_at']}"
            sim.report(cmd, {"at": cmd.step}, error=BOOM if failed else None)
            continue
        outcome = next(final, "ok")
        if outcome == "lost":
            sim.lose(cmd)
        elif outcome == "ok":
            sim.report(cmd, {"at": cmd.step})
        else:
            kind = {"stopped": cancellation.CANCELLED_KIND}.get(outcome, outcome)
            sim.report(cmd, error={"kind": kind, "message": outcome})
    raise AssertionError("the run did not end")


def _engine_error(sim: Sim) -> None:
    """What the orchestrator writes when deciding raised (`Orchestrator._engine_failure`)."""
    events = teardown.after_engine_error(sim.state, sim.pb, ENGINE, sim.now, sim.new_id, {})
    if not events:
        failed = ev.new_event(
            sim.new_id(), 77, ev.EXECUTION_FAILED, sim.now, payload={"error": ENGINE}
        )
        events = [failed]
    fl.fold(sim.state, events)
    sim.log.extend(events)
    sim.settle()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_whatever_way_a_run_ends_each_teardown_step_runs_once_after_the_rest(
    sc: dict[str, Any],
) -> None:
    pb = playbook(sc["body"])
    sim = _drive(pb, sc)
    bare = _drive(pb.model_copy(update={"executor": model.ExecutorSpec()}), sc)
    # the status and error are what they would have been without teardown
    assert (sim.state.status, sim.state.error) == (bare.state.status, bare.state.error)
    log = sim.log
    assert log[-1].event_type in ev.TERMINAL_EXECUTION_EVENTS
    assert [e.event_type for e in log].count(ev.TEARDOWN_STARTED) == 1
    start = next(i for i, e in enumerate(log) if e.event_type == ev.TEARDOWN_STARTED)
    # after every step and compensation: nothing of them is decided from then on
    assert not any(
        e.event_type.startswith("compensation.")
        or e.event_type in (ev.STEP_ENTER, ev.STEP_EXIT)
        or (e.event_type == ev.COMMAND_ISSUED and "teardown" not in e.payload)
        for e in log[start:]
    )
    steps = list(pb.executor.teardown)
    outcomes = [e for e in log if e.event_type in (ev.TEARDOWN_COMPLETED, ev.TEARDOWN_FAILED)]
    issued = [e for e in log if e.event_type == ev.COMMAND_ISSUED and "teardown" in e.payload]
    # one attempt issued per attempt number, in the listed order, one step at a time
    attempts = [(e.step, e.payload["attempt"]) for e in issued]
    assert len(attempts) == len(set(attempts))
    firsts = [s for s, a in attempts if a == 1]
    assert firsts == steps[: len(firsts)]
    recorded = log[-1].payload["teardown"]
    assert [r["step"] for r in recorded] == steps
    if not _engine_error_while_tearing_down(sim):
        # exactly once each: a first attempt and one outcome
        assert firsts == steps
        assert [e.step for e in outcomes] == steps
    for r in recorded:
        mine = [e for e in outcomes if e.step == r["step"]]
        if mine:
            assert len(mine) == 1
            done = mine[0].event_type == ev.TEARDOWN_COMPLETED
            assert r["status"] == (fs.COMPLETED if done else fs.FAILED)
        else:  # not run, or cut short: an engine error ended the run while tearing down
            assert r["status"] == fs.FAILED and r["error"] == ENGINE
        assert sim.state.step_status[r["step"]] == r["status"]


def _engine_error_while_tearing_down(sim: Sim) -> bool:
    return any(r["error"] == ENGINE for r in sim.log[-1].payload.get("teardown") or ())
