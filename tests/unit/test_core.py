"""The pure core, table-driven: events -> state, state -> commands."""

from __future__ import annotations

import ast
import functools
import os
import pathlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from milepost import ids
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core.policies import retry_delay
from milepost.playbook.durations import parse_duration
from milepost.store import projection
from tests.unit.sim import Sim, playbook

CORE = pathlib.Path(__file__).resolve().parents[2] / "milepost" / "core"
FORBIDDEN = {
    "asyncio",
    "time",
    "datetime",
    "random",
    "uuid",
    "os",
    "sqlite3",
    "socket",
    "threading",
    "subprocess",
    "httpx",
    "psycopg",
    "milepost.store",
    "milepost.engine",
    "milepost.api",
    "milepost.worker",
    "milepost.tools",
    "milepost.playbook.load",
}


def test_core_imports_nothing_impure() -> None:
    seen = []
    for path in sorted(CORE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                seen.append(name)
                bad = [f for f in FORBIDDEN if name == f or name.startswith(f + ".")]
                assert not bad, f"{path.name} imports {name}"
    assert "milepost.core.events" in " ".join(seen)  # the walk really looked at imports


LINEAR = """
workflow:
  - step: start
    tool: {kind: noop}
    next: a
  - step: a
    tool: {kind: noop}
    set: {ctx.seen_a: "{{ a.value }}"}
    next: {arcs: [{step: end, when: "{{ ctx.seen_a == 1 }}"}, {step: other}]}
  - step: other
    tool: {kind: noop}
  - step: end
    tool: {kind: noop}
"""


def test_linear_run_issues_one_command_per_step_and_completes() -> None:
    sim = Sim(playbook(LINEAR))
    assert [c.step for c in sim.live()] == ["start"]
    sim.complete("start", {"ok": True})
    assert [c.step for c in sim.live()] == ["a"]
    produced = sim.complete("a", {"value": 1})
    assert ("step.exit", "a") in sim.types(produced)
    assert sim.state.ctx == {"seen_a": 1}
    assert [c.step for c in sim.live()] == ["end"]
    produced = sim.complete("end", {"done": True})
    assert sim.types(produced)[-1] == ("execution.completed", None)
    assert sim.state.status == st.COMPLETED
    assert sim.state.results == {"start": {"ok": True}, "a": {"value": 1}, "end": {"done": True}}
    assert "other" not in sim.state.step_status


FANOUT = """
workflow:
  - step: start
    tool: {kind: noop}
    next: {spec: {mode: inclusive}, arcs: [{step: left}, {step: right}, {step: never, when: "{{ false }}"}]}
  - step: left
    tool: {kind: noop}
    next: [join]
  - step: right
    tool: {kind: noop}
    next: mid
  - step: mid
    tool: {kind: noop}
    next: join
  - step: never
    tool: {kind: noop}
  - step: join
    tool: {kind: noop}
"""


def test_inclusive_fanout_waits_at_the_join_until_every_branch_arrives() -> None:
    sim = Sim(playbook(FANOUT))
    sim.complete("start", {})
    assert sorted(c.step for c in sim.live()) == ["left", "right"]
    sim.complete("left", {})
    assert "join" in sim.state.pending and not sim.live("join")  # right can still reach join
    sim.complete("right", {})
    assert not sim.live("join")  # mid still can
    sim.complete("mid", {})
    assert [c.step for c in sim.live()] == ["join"]
    sim.complete("join", {})
    assert sim.state.status == st.COMPLETED
    assert sim.state.run_counts["join"] == 1
    assert "never" not in sim.state.step_status


LOOP = """
workload: {items: [10, 20, 30, 40, 50]}
workflow:
  - step: start
    loop: {in: "{{ items }}", iterator: n, spec: {mode: parallel, max_in_flight: 2}}
    tool: {kind: noop}
    next: {arcs: [{step: after, when: '{{ event.name == "loop.done" }}'}]}
  - step: after
    tool: {kind: noop}
"""


@pytest.mark.parametrize(
    ("mode", "first_wave"),
    [("parallel", 2), ("sequential", 1)],
)
def test_loop_keeps_at_most_max_in_flight_iterations_running(mode: str, first_wave: int) -> None:
    sim = Sim(playbook(LOOP.replace("mode: parallel", f"mode: {mode}")))
    assert [c.index for c in sim.live()] == list(range(first_wave))
    # finish out of order: results still come back ordered by index
    while sim.live("start"):
        cmds = sim.live("start")
        assert len(cmds) <= first_wave
        cmd = cmds[-1]
        sim.report(cmd, {"i": cmd.index})
    assert sim.state.results["start"] == [{"i": i} for i in range(5)]
    assert sim.state.results["start"].stats == {"total": 5, "success": 5, "failed": 0}
    assert [c.step for c in sim.live()] == ["after"]  # the loop.done guard matched


def test_loop_over_empty_list_runs_zero_iterations() -> None:
    sim = Sim(playbook(LOOP), {"items": []})
    assert sim.state.results["start"] == []
    assert [c.step for c in sim.live()] == ["after"]


@pytest.mark.parametrize(
    ("items", "message"),
    [("{{ 5 }}", "rendered int, not a list"), ("{{ nothing }}", "undefined")],
)
def test_loop_in_that_is_not_a_list_fails_the_run(items: str, message: str) -> None:
    sim = Sim(playbook(LOOP.replace('"{{ items }}"', f'"{items}"')))
    assert sim.state.status == st.FAILED
    assert message in sim.state.error["message"]
    assert sim.state.error["reason"].startswith("step 'start' failed:")


FAILING = """
workflow:
  - step: start
    tool: {kind: noop}
    spec: {retry: {max_attempts: 3, backoff: fixed, delay: 5, retry_on: [timeout]}}
    next: end
  - step: end
    tool: {kind: noop}
"""


def test_retryable_failure_is_retried_after_its_delay_with_a_new_key() -> None:
    sim = Sim(playbook(FAILING))
    first = sim.live()[0]
    produced = sim.report(first, error={"kind": "timeout", "message": "slow"})
    assert sim.types(produced) == [("command.retry_scheduled", "start")]
    assert sim.live() == [] and sim.wake_at == 1005.0
    sim.now = 1005.0
    sim.settle()
    second = sim.live()[0]
    assert second.attempt == 2 and second.idempotency_key != first.idempotency_key
    sim.complete("start", {"ok": 1})
    sim.complete("end", {})
    assert sim.state.status == st.COMPLETED


@pytest.mark.parametrize(
    ("kind", "reports"),
    [("timeout", 3), ("exception", 1)],
)
def test_failure_that_no_policy_absorbs_fails_the_run(kind: str, reports: int) -> None:
    sim = Sim(playbook(FAILING))
    for _ in range(reports):
        sim.now += 10
        sim.settle()
        sim.report(sim.live()[0], error={"kind": kind, "message": "boom", "task": None})
    assert sim.state.status == st.FAILED
    assert sim.state.error["reason"] == "step 'start' failed: boom"
    assert sim.state.error["kind"] == kind
    assert "end" not in sim.state.step_status


def test_admission_refusal_skips_the_step_and_its_arcs() -> None:
    pb = playbook("""
    workload: {dry_run: true}
    workflow:
      - step: start
        tool: {kind: noop}
        next: guarded
      - step: guarded
        tool: {kind: noop}
        spec: {policy: {admit: {rules: [{when: "{{ not workload.dry_run }}", then: {allow: true}}, {else: {then: {allow: false}}}]}}}
        next: end
      - step: end
        tool: {kind: noop}
    """)
    sim = Sim(pb)
    sim.complete("start", {})
    assert sim.state.step_status["guarded"] == st.SKIPPED
    assert sim.state.status == st.COMPLETED
    assert "end" not in sim.state.step_status


def test_bad_template_in_step_set_fails_the_run_not_hangs() -> None:
    # a syntax error is refused at load now (DSL 12.2); one that only fails as it renders
    # (here a division by zero) must still end the run, not hang it
    sim = Sim(playbook(LINEAR.replace('"{{ a.value }}"', '"{{ a.value // 0 }}"')))
    sim.complete("start", {})
    sim.complete("a", {"value": 1})
    assert sim.state.status == st.FAILED
    assert "step 'a'" in sim.state.error["reason"]


def test_cancel_request_stops_new_work_and_ends_cancelled() -> None:
    sim = Sim(playbook(LINEAR))
    cancel = ev.new_event(sim.new_id(), 77, ev.EXECUTION_CANCEL_REQUESTED, sim.now)
    fl.fold(sim.state, [cancel])
    assert sim.settle() == []  # start is still running
    sim.complete("start", {})
    assert sim.state.status == st.CANCELLED
    assert "a" not in sim.state.step_status


def test_duplicate_event_id_changes_nothing() -> None:
    sim = Sim(playbook(LINEAR))
    cmd = sim.live()[0]
    sim.report(cmd, {"x": 1}, ctx={"k": 1})
    completed = next(e for e in sim.log if e.event_type == ev.COMMAND_COMPLETED)
    before = fl.clone(sim.state)
    fl.fold(sim.state, [completed])
    assert sim.state == before


def test_late_report_for_a_settled_command_is_ignored() -> None:
    sim = Sim(playbook(LINEAR))
    cmd = sim.live()[0]
    sim.report(cmd, {"first": True})
    sim.report(cmd, {"second": True})  # a stale worker reporting the same command again
    assert sim.state.results["start"] == {"first": True}
    assert sim.state.run_counts["a"] == 1


def test_back_edge_reruns_a_step_and_keeps_the_latest_result() -> None:
    pb = playbook("""
    workflow:
      - step: start
        tool: {kind: noop}
        set: {ctx.n: "{{ (ctx.n | default(0)) + 1 }}"}
        next: {arcs: [{step: start, when: "{{ ctx.n < 3 }}"}, {step: done}]}
      - step: done
        tool: {kind: noop}
    """)
    sim = Sim(pb)
    sim.run_all({"start": lambda c: {"run": c.run}})
    assert sim.state.run_counts["start"] == 3
    assert sim.state.results["start"] == {"run": 3}
    assert sim.state.status == st.COMPLETED


def _log_of_fanout_run(order: list[int]) -> list[ev.Event]:
    sim = Sim(playbook(LOOP))
    while sim.live():
        cmds = sim.live()
        sim.report(cmds[order[len(sim.log) % len(order)] % len(cmds)], {"n": len(sim.log)})
    return sim.log


@settings(max_examples=40, deadline=None)
@given(
    order=hs.lists(hs.integers(0, 5), min_size=1, max_size=8),
    cuts=hs.lists(hs.integers(0, 60), max_size=6),
)
def test_folding_in_any_split_equals_folding_at_once(order: list[int], cuts: list[int]) -> None:
    log = _log_of_fanout_run(order)
    whole = fl.fold(None, log)
    points = sorted({min(c, len(log)) for c in cuts} | {0, len(log)})
    state = None
    for a, b in zip(points, points[1:], strict=False):
        if a < b:
            state = fl.fold(state, log[a:b])
    assert state == whole
    assert whole.status == st.COMPLETED


def test_fold_rejects_unknown_event_types() -> None:
    sim = Sim(playbook(LINEAR))
    with pytest.raises(fl.UnknownEvent):
        fl.fold(sim.state, [ev.new_event(999, 77, "step.teleported", 0.0)])


def test_fold_passes_over_an_informative_event_of_an_unknown_type_only() -> None:
    """DSL 12.3: a NoETL worker's event of its own type is in the log, never in the state;
    the mark does nothing on a type the engine knows, and an unmarked unknown type is still
    a log the fold refuses."""
    sim = Sim(playbook(LINEAR))
    before = fl.clone(sim.state)
    note = ev.new_event(
        998, sim.state.execution_id, "step.result.preview", 0.0, meta={ev.INFORMATIVE: True}
    )
    fl.fold(sim.state, [note])
    assert note.event_id in sim.state.seen
    assert (
        sim.state.running == before.running
        and sim.state.ctx == before.ctx
        and sim.state.event_count == before.event_count
    )
    cancel = ev.new_event(
        997, sim.state.execution_id, ev.EXECUTION_CANCEL_REQUESTED, 0.0, meta={ev.INFORMATIVE: True}
    )
    assert not ev.informative(cancel)
    fl.fold(sim.state, [cancel])
    assert sim.state.cancel_requested


def test_snowflake_ids_are_monotonic_even_when_the_clock_steps_back() -> None:
    base = 1_800_000_000.0
    times = iter([base, base, base - 1, base + 1] + [base + 1] * 5000)
    gen = ids.Snowflake(3, lambda: next(times))
    values = [gen() for _ in range(5004)]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert ids.timestamp_of(values[0]) == pytest.approx(base)


@settings(max_examples=200, deadline=None)
@given(
    hs.lists(
        hs.tuples(hs.integers(0, 3), hs.one_of(hs.none(), hs.integers(1, 4096))),
        min_size=1,
        max_size=60,
    )
)
def test_snowflake_blocks_are_consecutive_ids_nobody_else_gets(
    calls: list[tuple[int, int | None]],
) -> None:
    # (clock steps in ms, None: one id, n: a block of n): every id handed out, single or
    # in a block, is distinct and they rise in the order they were handed out
    now = [1_800_000_000_000]

    def clock() -> float:
        return now[0] / 1000

    gen = ids.Snowflake(5, clock)
    handed: list[int] = []
    for step, size in calls:
        now[0] += step
        if size is None:
            handed.append(gen())
        else:
            first = gen.block(size)
            handed.extend(range(first, first + size))
    assert handed == sorted(handed) and len(set(handed)) == len(handed)
    assert {ids.machine_of(i) for i in handed} == {5}


def test_block_of_takes_blocks_where_a_generator_makes_them() -> None:
    from milepost.engine.locks import locked_ids

    gen = ids.Snowflake(1, lambda: 1_800_000_000.0)
    first = ids.block_of(locked_ids(gen), 3)
    assert first is not None and gen() == first + 3  # the block's three are never handed out
    assert ids.block_of(lambda: 7, 3) is None  # a plain function: ids one by one
    with pytest.raises(ValueError, match="1 to 4096"):
        gen.block(4097)


@pytest.mark.parametrize(
    ("backoff", "attempt", "expected"),
    [
        ("fixed", 3, 2.0),
        ("linear", 3, 6.0),
        ("exponential", 3, 8.0),
        ("none", 3, 0.0),
        ("exponential", 10, 60.0),
    ],
)
def test_retry_delay(backoff: str, attempt: int, expected: float) -> None:
    assert retry_delay(backoff, 2.0, attempt, max_delay=60) == expected


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("1d", 86400),
        (12, 12),
        ("250ms", 0.25),
        ("1.5", 1.5),
    ],
)
def test_parse_duration(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_idempotency_key_is_stable_per_run_and_index_and_distinct_per_attempt() -> None:
    a = ids.idempotency_key(1, "s", 1, None, 1)
    assert a == ids.idempotency_key(1, "s", 1, None, 1)
    assert (
        len(
            {
                a,
                ids.idempotency_key(1, "s", 1, None, 2),
                ids.idempotency_key(1, "s", 2, None, 1),
                ids.idempotency_key(1, "s", 1, 0, 1),
            }
        )
        == 4
    )


TWO_BRANCHES = """
workflow:
  - step: start
    tool: {kind: noop}
    next: {spec: {mode: inclusive}, arcs: [{step: looping}, {step: breaking}]}
  - step: looping
    loop: {in: "{{ range(10) | list }}", iterator: i}
    tool: {kind: noop}
  - step: breaking
    tool: {kind: noop}
"""


def test_a_failure_elsewhere_stops_a_loop_at_its_next_iteration_and_fails_the_run() -> None:
    sim = Sim(playbook(TWO_BRANCHES))
    sim.complete("start", {})
    sim.complete("looping", 0)
    sim.report(sim.live("breaking")[0], error={"kind": "exception", "message": "boom"})
    assert sim.state.status == st.RUNNING  # iteration 1 of the loop is still running
    sim.complete("looping", 1)
    assert sim.live() == []
    assert sim.state.status == st.FAILED
    assert sim.state.step_status["looping"] == st.CANCELLED
    assert sim.state.error["reason"] == "step 'breaking' failed: boom"


def test_cancel_during_a_loop_ends_the_run_cancelled_once_the_iteration_finishes() -> None:
    sim = Sim(playbook(TWO_BRANCHES))
    sim.complete("start", {})
    fl.fold(sim.state, [ev.new_event(sim.new_id(), 77, ev.EXECUTION_CANCEL_REQUESTED, sim.now)])
    sim.settle()
    sim.complete("looping", 0)
    sim.complete("breaking", {})
    assert sim.state.status == st.CANCELLED
    assert sim.state.step_status["looping"] == st.CANCELLED
    assert len(sim.state.results.get("looping") or []) == 0


def test_a_lost_command_gets_new_attempts_even_without_spec_retry() -> None:
    sim = Sim(playbook(LINEAR))
    for attempt in (1, 2, 3):
        cmd = sim.live()[0]
        assert (cmd.step, cmd.attempt) == ("start", attempt)
        assert cmd.command_id == next(
            e.event_id for e in sim.log if e.payload.get("command_id") == cmd.command_id
        )
        lost = ev.new_event(
            sim.new_id(),
            77,
            ev.COMMAND_LEASE_EXPIRED,
            sim.now,
            step="start",
            payload={"command_id": cmd.command_id},
        )
        fl.fold(sim.state, [lost])
        sim.settle()
        # a report from the vanished worker arriving late changes nothing
        sim.report(cmd, {"late": True})
        assert "start" not in sim.state.results
    assert sim.state.status == st.FAILED and sim.state.error["kind"] == "lost"


PAIR = """
workflow:
  - step: start
    loop: {in: "{{ [0, 1] }}", iterator: n, spec: {mode: parallel, max_in_flight: 2}}
    tool: {kind: noop}
    RETRY
"""
BOOM = {"kind": "exception", "message": "boom"}


def _pair(retry: str = "") -> Sim:
    return Sim(playbook(PAIR.replace("RETRY", retry)))


def _live_index(sim: Sim, index: int) -> st.Command:
    return next(c for c in sim.live() if c.index == index)


def test_a_stuck_log_of_a_failed_loop_with_a_sibling_retry_scheduled_ends_failed() -> None:
    # the log an older engine wrote and then never moved (issue 8, item 2): iteration 0
    # failed for good, iteration 1 lost its worker and got a retry that was never issued
    sim = _pair()
    first, second = sim.live()
    history = [
        ev.new_event(
            sim.new_id(),
            77,
            ev.COMMAND_FAILED,
            sim.now,
            step="start",
            payload={"command_id": first.command_id, "error": BOOM},
        ),
        ev.new_event(
            sim.new_id(),
            77,
            ev.COMMAND_LEASE_EXPIRED,
            sim.now,
            step="start",
            payload={"command_id": second.command_id},
        ),
        ev.new_event(
            sim.new_id(),
            77,
            ev.COMMAND_RETRY_SCHEDULED,
            sim.now,
            step="start",
            payload={"run": 1, "index": 1, "attempt": 2, "not_before": sim.now},
        ),
    ]
    fl.fold(sim.state, history)
    sim.settle()
    assert sim.state.status == st.FAILED
    assert sim.state.error["reason"] == "step 'start' failed: iteration 0: boom"
    assert sim.live() == []


LOST = {"kind": "lost"}
TIMEOUT = {"kind": "timeout", "message": "slow"}
DELAYED = "spec: {retry: {max_attempts: 3, backoff: fixed, delay: 5, retry_on: [timeout, lost]}}"


@pytest.mark.parametrize(
    ("retry", "outcomes"),
    [
        # the issue's order: a final failure, then the sibling in flight loses its worker
        ("", [(0, BOOM), (1, LOST)]),
        (DELAYED, [(0, BOOM), (1, LOST)]),
        # the sibling fails first, retryably, and waits for its delay when 0 fails for good
        (DELAYED, [(1, LOST), (0, BOOM)]),
        (DELAYED, [(1, TIMEOUT), (0, BOOM)]),
        # the sibling in flight fails retryably after the final failure: not retried
        (DELAYED, [(0, BOOM), (1, TIMEOUT)]),
        # the sibling in flight finishes: its result is kept, the step still fails
        (DELAYED, [(0, BOOM), (1, None)]),
    ],
)
def test_a_final_iteration_failure_ends_the_loop_failed_whatever_its_siblings_do(
    retry: str, outcomes: list[tuple[int, dict[str, str] | None]]
) -> None:
    sim = _pair(retry)
    for index, error in outcomes:
        cmd = _live_index(sim, index)
        if error is LOST:
            sim.lose(cmd)
        else:
            sim.report(cmd, {"n": index}, error=error)
    assert sim.live() == [] and sim.wake_at is None
    assert sim.state.status == st.FAILED
    assert sim.state.error["reason"] == "step 'start' failed: iteration 0: boom"
    issued = [e for e in sim.log if e.event_type == ev.COMMAND_ISSUED]
    assert len(issued) == 2  # no retry was issued once iteration 0 had failed for good


# -- liveness: no reachable state is both non-terminal and without anything to move it --

LIVENESS = """
workflow:
  - step: start
    tool: {kind: noop}
    next: {spec: {mode: inclusive}, arcs: [{step: work}, {step: side, when: "{{ SIDE }}"}]}
  - step: work
    loop: {in: "{{ range(ITEMS) | list }}", iterator: i, spec: LOOP}
    tool: {kind: noop}
    RETRY
    next: after
  - step: side
    tool: {kind: noop}
    RETRY
  - step: after
    tool: {kind: noop}
    RETRY
"""
RETRIES = ("", DELAYED, "spec: {retry: {max_attempts: 2, backoff: none, retry_on: [timeout]}}")
OUTCOMES = ({}, BOOM, TIMEOUT, LOST)


@functools.cache
def _liveness_playbook(items: int, loop: str, retry: str, side: bool) -> Any:
    text = (
        LIVENESS.replace("ITEMS", str(items))
        .replace("LOOP", loop)
        .replace("RETRY", retry)
        .replace("SIDE", str(side).lower())
    )
    return playbook(text)


def _moves(sim: Sim) -> list[tuple[str, st.Command | None, dict[str, str]]]:
    moves: list[tuple[str, st.Command | None, dict[str, str]]] = [
        ("report", cmd, outcome) for cmd in sim.live() for outcome in OUTCOMES
    ]
    if sim.wake_at is not None:
        moves.append(("fire", None, {}))
    if not sim.state.cancel_requested:
        moves.append(("cancel", None, {}))
    return moves


def _move(sim: Sim, kind: str, cmd: st.Command | None, outcome: dict[str, str]) -> None:
    if kind == "fire":
        assert sim.fire(), "a timer went off and nothing moved"
    elif kind == "cancel":
        sim.cancel()
    else:
        assert cmd is not None
        if outcome is LOST:
            sim.lose(cmd)
        else:
            sim.report(cmd, {"i": cmd.index}, error=outcome or None)


def _assert_movable(sim: Sim) -> None:
    state = sim.state
    assert state.terminal or state.commands or sim.wake_at is not None, (
        f"stuck RUNNING: {[(e.event_type, e.step, e.payload.get('index')) for e in sim.log]}"
    )


LIVENESS_EXAMPLES = int(os.environ.get("MILEPOST_LIVENESS_EXAMPLES", "150"))
"""Histories the liveness property plays; raise it for a deeper search (a few seconds per
thousand)."""


@settings(max_examples=LIVENESS_EXAMPLES, deadline=None)
@given(
    items=hs.integers(0, 3),
    loop=hs.sampled_from(
        [
            "{mode: sequential}",
            "{mode: parallel, max_in_flight: 1}",
            "{mode: parallel, max_in_flight: 2}",
            "{mode: parallel, max_in_flight: 3}",
        ]
    ),
    retry=hs.sampled_from(RETRIES),
    side=hs.booleans(),
    data=hs.data(),
)
def test_no_reachable_state_is_running_with_nothing_to_move_it(
    items: int, loop: str, retry: str, side: bool, data: hs.DataObject
) -> None:
    sim = Sim(_liveness_playbook(items, loop, retry, side))
    _assert_movable(sim)
    for _ in range(25):
        if sim.state.terminal:
            break
        _move(sim, *data.draw(hs.sampled_from(_moves(sim))))
        _assert_movable(sim)
    # then every worker succeeds: the run must end, not go round forever
    for _ in range(100):
        if sim.state.terminal:
            break
        _move(sim, "report", sim.live()[0], {}) if sim.live() else _move(sim, "fire", None, {})
        _assert_movable(sim)
    assert sim.state.terminal


def test_a_report_of_a_command_still_live_when_the_run_ended_is_stale() -> None:
    # an engine error ends a run with commands out; the store cancels them, so must the fold
    sim = _pair()
    cmd = sim.live()[0]
    fl.fold(
        sim.state,
        [
            ev.new_event(
                sim.new_id(),
                77,
                ev.EXECUTION_FAILED,
                sim.now,
                payload={"error": {"kind": "engine"}},
            )
        ],
    )
    late = ev.new_event(
        sim.new_id(),
        77,
        ev.COMMAND_COMPLETED,
        sim.now,
        step="start",
        payload={"command_id": cmd.command_id, "result": 1},
    )
    [stored] = fl.fold_reports(sim.state, [late])
    assert stored.meta["stale"] is True
    assert sim.state.commands == {} and sim.state.status == st.FAILED


_json_leaves = hs.one_of(
    hs.none(),
    hs.booleans(),
    hs.integers(),
    hs.floats(),
    hs.text(),
    hs.builds(object),
    hs.binary(max_size=4),
)
_json_keys = hs.one_of(hs.text(max_size=8), hs.integers(), hs.floats(), hs.booleans(), hs.none())


@settings(max_examples=300, deadline=None)
@given(
    hs.recursive(
        _json_leaves,
        lambda inner: hs.one_of(
            hs.lists(inner, max_size=4),
            hs.tuples(inner, inner),
            hs.dictionaries(_json_keys, inner, max_size=4),
        ),
        max_leaves=20,
    )
)
def test_to_json_writes_what_json_dumps_writes(value: Any) -> None:
    # the log's text of a result or a meta must not change with the encoder behind it:
    # NaN, non-string keys, what only `default=str` can write, non-ASCII text
    import json

    try:
        expected: str | type[Exception] = json.dumps(value, default=str)
    except (TypeError, ValueError) as exc:  # a float key json.dumps cannot write, say
        expected = type(exc)
    if isinstance(expected, str):
        assert ev.to_json(value) == expected
    else:
        with pytest.raises(expected):
            ev.to_json(value)


def test_the_event_types_the_projection_passes_over_change_no_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `changes` skips these types before its cases: walked through every case, each
    # must change no row, or the skip would drop a change
    skipped = sorted(projection._NO_ROWS)
    monkeypatch.setattr(projection, "_NO_ROWS", frozenset())
    for etype in skipped:
        event = ev.new_event(
            1,
            2,
            etype,
            1.0,
            step="s",
            payload={"command_id": 3, "run": 1, "index": -1, "attempt": 1, "epoch": 1},
        )
        assert projection.changes([event]).empty, etype
