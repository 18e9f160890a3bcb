"""Usage per step and budgets (DSL 10.6): what a tool reports leaves the result for the
command's report, the fold sums it per execution and per step, and `executor.spec.budget`
fails the run at the next step boundary.

The runner runs with the fake tools of `test_attempt`; the python worker's side runs in
this process (`python_worker.Runner`); decisions with the simulator (`tests/unit/sim.py`).
"""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import pytest

from milepost.attempt.runner import run_attempt
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core import usage
from milepost.core.work import report_events
from milepost.errors import PlaybookInvalid
from milepost.store import memory, projection
from milepost.store import usage as stored
from milepost.tools import python_worker
from milepost.tools.base import ToolCall, ToolFailure, ToolResult
from milepost.tools.python import _decode
from tests.unit import sim
from tests.unit.test_attempt import FakeSleep, FakeTools, playbook, work_item

GPT = {
    "input_tokens": 812,
    "output_tokens": 164,
    "cost": 0.0041,
    "provider": "openai",
    "model": "gpt-x",
}


def attempt(pb: Any, tools: FakeTools, step: str = "x") -> Any:
    return asyncio.run(run_attempt(pb, work_item(step), tools, sleep=FakeSleep()))


def http_result(body: Any, status: int = 200) -> ToolResult:
    """What the http tool returns for a JSON body (`tools.http.response_result`)."""
    data = {"status_code": status, "headers": {}, "data": body, "body": body}
    error = None if status < 400 else ToolFailure("server_error", f"HTTP {status}", status=status)
    return ToolResult(data=data, error=error, http={"status": status, "headers": {}})


# -- the runner --------------------------------------------------------------------------


def test_the_python_usage_global_goes_on_the_report_and_not_in_the_result() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool: {kind: python, code: draft}
    """)
    tools = FakeTools(draft=ToolResult(data={"text": "hi"}, usage=GPT))
    outcome = attempt(pb, tools)
    assert outcome.ok and outcome.result == {"text": "hi"}
    assert outcome.usage == [
        {
            "provider": "openai",
            "model": "gpt-x",
            "input_tokens": 812,
            "output_tokens": 164,
            "cost": 0.0041,
        }
    ]
    [event] = report_events(work_item(), outcome, 99, 1.0)
    assert event.event_type == ev.COMMAND_COMPLETED
    assert event.payload["usage"] == outcome.usage
    assert "usage" not in event.payload["result"]


def test_an_http_body_usage_leaves_the_result_data() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool: {kind: http, url: "http://h/chat"}
    """)
    tools = FakeTools(
        http=http_result({"answer": 42, "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
    )
    outcome = attempt(pb, tools)
    assert outcome.result["data"] == {"answer": 42} == outcome.result["body"]
    assert outcome.usage == [
        {"provider": "", "model": "", "input_tokens": 10, "output_tokens": 5, "cost": 0.0}
    ]


def test_an_http_usage_of_another_shape_stays_in_the_data() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool: {kind: http, url: "http://h/quota"}
    """)
    body = {"usage": {"requests_today": 3}}
    outcome = attempt(pb, FakeTools(http=http_result(body)))
    assert outcome.result["data"] == body
    assert outcome.usage == []
    [event] = report_events(work_item(), outcome, 99, 1.0)
    assert "usage" not in event.payload  # a run without usage writes what it always wrote


def test_a_pipeline_sums_its_tasks_per_provider_and_model_retries_included() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - name: a
                kind: python
                code: a
                spec:
                  policy:
                    rules:
                      - when: "{{ output.meta.attempt < 2 }}"
                        then: {do: retry, attempts: 3}
                      - else: {then: {do: continue}}
              - name: b
                kind: python
                code: b
    """)
    one = {
        "input_tokens": 100,
        "output_tokens": 10,
        "cost": 0.5,
        "provider": "openai",
        "model": "gpt-x",
    }
    other = {"input_tokens": 7, "cost": 1.25, "provider": "anthropic", "model": "claude"}
    tools = FakeTools(
        a=ToolResult(data={"a": 1}, usage=one), b=ToolResult(data={"b": 2}, usage=other)
    )
    outcome = attempt(pb, tools)
    assert tools.labels == ["a", "a", "b"]
    assert outcome.result == {"a": 1, "b": 2}
    assert outcome.usage == [
        {
            "provider": "anthropic",
            "model": "claude",
            "input_tokens": 7,
            "output_tokens": 0,
            "cost": 1.25,
        },
        {
            "provider": "openai",
            "model": "gpt-x",
            "input_tokens": 200,
            "output_tokens": 20,
            "cost": 1.0,
        },
    ]


def test_a_failed_attempt_reports_what_it_spent() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - {name: a, kind: python, code: a}
              - {name: b, kind: http, url: "http://h/x"}
    """)
    tools = FakeTools(
        a=ToolResult(data={}, usage={"output_tokens": 3, "cost": 0.01}),
        http=http_result({"usage": {"input_tokens": 4}}, status=500),
    )
    outcome = attempt(pb, tools)
    assert not outcome.ok and outcome.error["kind"] == "server_error"
    [event] = report_events(work_item(), outcome, 99, 1.0)
    assert event.event_type == ev.COMMAND_FAILED
    assert event.payload["usage"] == [
        {"provider": "", "model": "", "input_tokens": 4, "output_tokens": 3, "cost": 0.01}
    ]


@pytest.mark.parametrize(
    ("reported", "message"),
    [
        ("lots", "step 'x': usage must be a mapping, got str"),
        (
            {"input_tokens": -1},
            "step 'x': usage.input_tokens must be a non-negative integer, got -1",
        ),
        (
            {"output_tokens": 1.5},
            "step 'x': usage.output_tokens must be a non-negative integer, got 1.5",
        ),
        ({"cost": "5"}, "step 'x': usage.cost must be a non-negative number, got '5'"),
        ({"cost": float("nan")}, "step 'x': usage.cost must be a non-negative number, got nan"),
        ({"cost": True}, "step 'x': usage.cost must be a non-negative number, got True"),
        ({"model": 4}, "step 'x': usage.model must be a string, got 4"),
    ],
)
def test_usage_that_cannot_be_counted_fails_the_step_naming_it(reported: Any, message: str) -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool: {kind: python, code: draft}
    """)
    outcome = attempt(pb, FakeTools(draft=ToolResult(data=1, usage=reported)))
    assert not outcome.ok
    assert outcome.error["kind"] == "usage" and outcome.error["message"] == message
    assert outcome.error["retryable"] is False


# -- the python worker -------------------------------------------------------------------


def python(code: str, inputs: dict[str, Any] | None = None) -> ToolResult:
    payload = pickle.dumps((code, dict(inputs or {}), {}, "k", None), protocol=5)
    reply = python_worker.Runner().handle(payload)
    return _decode(reply, ToolCall("python", {}, {}, {}, "k"))


def test_python_code_reports_usage_by_assigning_the_global() -> None:
    result = python("usage = {'input_tokens': 3, 'cost': 0.5}\nresult = {'n': n}", {"n": 1})
    assert result.ok and result.data == {"n": 1}
    assert result.usage == {"input_tokens": 3, "cost": 0.5}


def test_python_usage_reaches_the_global_from_code_with_a_top_level_return() -> None:
    result = python("usage = {'output_tokens': 9}\nreturn n + 1", {"n": 1})
    assert result.data == 2 and result.usage == {"output_tokens": 9}


def test_python_usage_assigned_before_a_raise_is_still_reported() -> None:
    result = python("usage = {'cost': 2.0}\nraise ValueError('no')")
    assert result.error is not None and result.error.code == "ValueError"
    assert result.usage == {"cost": 2.0}


def test_python_usage_starts_unset_whatever_the_inputs_hold() -> None:
    result = python("result = input_data['usage']", {"usage": {"cost": 1.0}})
    assert result.data == {"cost": 1.0} and result.usage is None


# -- the fold and the store's projection ---------------------------------------------------


def report(
    xid: int, eid: int, step: str, reported: Any, *, failed: bool = False, stale: bool = False
) -> ev.Event:
    payload: dict[str, Any] = {
        "command_id": 1000 + eid,
        "run": 1,
        "index": -1,
        "attempt": 1,
        "usage": reported,
    }
    payload.update({"error": {"kind": "x"}} if failed else {"result": None})
    return ev.new_event(
        eid,
        xid,
        ev.COMMAND_FAILED if failed else ev.COMMAND_COMPLETED,
        float(eid),
        step=step,
        payload=payload,
        meta={"stale": True} if stale else {},
    )


def test_the_fold_sums_usage_per_execution_and_step_and_skips_stale_reports() -> None:
    started = ev.new_event(1, 5, ev.EXECUTION_STARTED, 0.0, payload={"path": "p"})
    a = [
        {
            "provider": "openai",
            "model": "gpt-x",
            "input_tokens": 10,
            "output_tokens": 2,
            "cost": 0.1,
        }
    ]
    b = [
        {
            "provider": "openai",
            "model": "gpt-x",
            "input_tokens": 1,
            "output_tokens": 1,
            "cost": 0.2,
        },
        {"provider": "", "model": "", "input_tokens": 0, "output_tokens": 4, "cost": 0.0},
    ]
    log = [
        started,
        report(5, 2, "draft", a),
        report(5, 3, "review", b, failed=True),
        report(5, 4, "draft", a, stale=True),
    ]
    state = fl.fold(None, log)
    assert (state.usage.tokens, state.usage.cost) == (18, 0.3)
    assert state.usage.summary() == {
        "tokens": 18,
        "input_tokens": 11,
        "output_tokens": 7,
        "cost": 0.3,
        "by": [
            {
                "provider": "",
                "model": "",
                "input_tokens": 0,
                "output_tokens": 4,
                "cost": 0.0,
                "tokens": 4,
            },
            {
                "provider": "openai",
                "model": "gpt-x",
                "input_tokens": 11,
                "output_tokens": 3,
                "cost": 0.3,
                "tokens": 14,
            },
        ],
    }
    assert state.step_usage["draft"].tokens == 12 and state.step_usage["review"].tokens == 6
    # the store's projection counts the same reports as the fold
    rows: dict[stored.Key, list[float]] = {}
    stored.apply(projection.changes(log).usage, rows)
    assert rows == {(5, "", ""): [0, 4, 0.0], (5, "openai", "gpt-x"): [11, 3, 0.3]}


def test_a_run_without_usage_folds_no_totals() -> None:
    s = sim.Sim(
        sim.playbook("""
        workflow:
          - step: start
            tool: {kind: noop}
    """)
    )
    s.run_all()
    assert s.state.status == st.COMPLETED and s.state.usage.summary() is None
    assert not s.state.step_usage


def test_memory_store_reads_usage_per_execution_and_per_playbook() -> None:
    store = memory.MemoryStore()
    gpt = [
        {"provider": "openai", "model": "gpt-x", "input_tokens": 5, "output_tokens": 5, "cost": 1.5}
    ]
    store.append(
        [
            ev.new_event(1, 5, ev.EXECUTION_STARTED, 0.0, payload={"path": "agent"}),
            ev.new_event(2, 6, ev.EXECUTION_STARTED, 0.0, payload={"path": "agent"}),
            report(5, 3, "s", gpt),
            report(6, 4, "s", gpt),
            report(5, 7, "s", gpt),
        ]
    )
    assert store.execution_usage(5) == [stored.UsageRow("agent", "openai", "gpt-x", 10, 10, 3.0, 5)]
    assert store.playbook_usage() == [stored.UsageRow("agent", "openai", "gpt-x", 15, 15, 4.5)]
    assert store.playbook_usage("other") == []


# -- budgets: at load ----------------------------------------------------------------------

BUDGETED = """
    executor:
      spec:
        budget: {budget}
    workflow:
      - step: start
        tool: {{kind: noop}}
"""


def test_a_budget_is_read_at_load() -> None:
    pb = sim.playbook(BUDGETED.format(budget="{tokens: 200000, cost: 5}"))
    assert pb.executor.budget is not None
    assert (pb.executor.budget.tokens, pb.executor.budget.cost) == (200000, 5.0)


@pytest.mark.parametrize(
    ("budget", "problem"),
    [
        ("{tokens: 0}", "executor.spec.budget.tokens: expected a positive integer, got 0"),
        ("{tokens: 1.5}", "executor.spec.budget.tokens: expected a positive integer, got 1.5"),
        ("{cost: -1}", "executor.spec.budget.cost: expected a positive number, got -1"),
        ("{cost: true}", "executor.spec.budget.cost: expected a positive number, got True"),
        ("{cost: 'x'}", "executor.spec.budget.cost: expected a positive number, got 'x'"),
        ("{dollars: 3}", "unknown field 'dollars' (expected one of: cost, tokens)"),
        ("{}", "executor.spec.budget: expected at least one of: cost, tokens"),
        ("5", "executor.spec.budget: expected a mapping, got"),
    ],
)
def test_a_wrong_budget_is_refused_at_load_naming_the_field(budget: str, problem: str) -> None:
    with pytest.raises(PlaybookInvalid) as caught:
        sim.playbook(BUDGETED.format(budget=budget))
    assert any(problem in p for p in caught.value.problems), caught.value.problems


# -- budgets: the decision -----------------------------------------------------------------


def spend(s: sim.Sim, step: str, cost: float = 0.0, tokens: int = 0) -> list[ev.Event]:
    """Complete the step's oldest live command with a report of that usage."""
    cmd = s.live(step)[0]
    reported = [
        {
            "provider": "openai",
            "model": "gpt-x",
            "input_tokens": tokens,
            "output_tokens": 0,
            "cost": cost,
        }
    ]
    event = ev.new_event(
        s.new_id(),
        77,
        ev.COMMAND_COMPLETED,
        s.now,
        step=step,
        payload={
            "command_id": cmd.command_id,
            "run": cmd.run,
            "index": cmd.index,
            "attempt": cmd.attempt,
            "result": {"ok": True},
            "ctx": {},
            "usage": reported,
        },
    )
    fl.fold(s.state, [event])
    s.log.append(event)
    return s.settle()


CHAIN = """
    executor:
      spec:
        budget: {cost: 5.0, tokens: 1000}
    workflow:
      - step: start
        tool: {kind: noop}
        next: {arcs: [{step: draft}]}
      - step: draft
        tool: {kind: python, code: draft}
        next: {arcs: [{step: publish}]}
      - step: publish
        tool: {kind: noop}
"""


def test_a_budget_passed_fails_the_run_at_the_step_boundary() -> None:
    s = sim.Sim(sim.playbook(CHAIN))
    spend(s, "start", cost=2.0)
    assert s.live("draft")  # 2.0 is within the budget: the run goes on
    events = spend(s, "draft", cost=3.12)
    assert s.types(events) == [
        (ev.STEP_EXIT, "draft"),
        (ev.BUDGET_EXCEEDED, "draft"),
        (ev.EXECUTION_FAILED, None),
    ]
    assert s.state.status == st.FAILED
    assert s.state.error is not None
    assert s.state.error["kind"] == "budget"
    assert s.state.error["message"] == "budget exceeded: cost 5.12 > 5.0 after step 'draft'"
    assert "publish" not in s.state.step_status


def test_a_token_budget_names_the_tokens() -> None:
    s = sim.Sim(sim.playbook(CHAIN))
    spend(s, "start", tokens=1001)
    assert s.state.error is not None
    assert s.state.error["message"] == "budget exceeded: tokens 1001 > 1000 after step 'start'"


def test_running_steps_finish_before_the_run_fails_and_nothing_new_starts() -> None:
    s = sim.Sim(
        sim.playbook("""
        executor:
          spec:
            budget: {cost: 1.0}
        workflow:
          - step: start
            tool: {kind: noop}
            next: {spec: {mode: inclusive}, arcs: [{step: a}, {step: slow}]}
          - step: a
            tool: {kind: noop}
            next: {arcs: [{step: after_a}]}
          - step: slow
            tool: {kind: noop}
            next: {arcs: [{step: after_slow}]}
          - step: after_a
            tool: {kind: noop}
          - step: after_slow
            tool: {kind: noop}
    """)
    )
    spend(s, "start")
    events = spend(s, "a", cost=1.5)
    assert s.types(events) == [(ev.STEP_EXIT, "a"), (ev.BUDGET_EXCEEDED, "a")]
    assert s.state.status == st.RUNNING and [c.step for c in s.live()] == ["slow"]
    events = spend(s, "slow", cost=0.25)  # spent while the run was stopping: counted too
    assert s.types(events)[-1] == (ev.EXECUTION_FAILED, None)
    assert s.state.usage.cost == 1.75
    assert "after_a" not in s.state.step_status and "after_slow" not in s.state.step_status
    assert s.state.error is not None
    assert s.state.error["message"] == "budget exceeded: cost 1.5 > 1.0 after step 'a'"


def test_a_loop_stops_issuing_iterations_once_an_iteration_passed_the_budget() -> None:
    """Each iteration's end is a step boundary (DSL 10.6): the third never starts."""
    s = sim.Sim(
        sim.playbook("""
        executor:
          spec:
            budget: {cost: 1.0}
        workflow:
          - step: start
            tool: {kind: noop}
            loop: {in: "{{ [1, 2, 3] }}", iterator: i, mode: sequential}
            next: {arcs: [{step: end}]}
          - step: end
            tool: {kind: noop}
    """)
    )
    spend(s, "start", cost=0.6)
    assert [c.index for c in s.live("start")] == [1]  # within the budget: the next one
    events = spend(s, "start", cost=0.6)
    assert (ev.BUDGET_EXCEEDED, "start") in s.types(events)
    assert s.live() == [] and s.state.status == st.FAILED
    issued = [e.payload["index"] for e in s.log if e.event_type == ev.COMMAND_ISSUED]
    assert issued == [0, 1]
    assert s.state.step_status["start"] == st.CANCELLED and "end" not in s.state.step_status
    [cut] = [e for e in s.log if e.event_type == ev.STEP_EXIT]
    assert cut.payload["reason"] == "budget exceeded" and cut.payload["done"] == 2
    assert s.state.error is not None
    assert s.state.error["message"] == "budget exceeded: cost 1.2 > 1.0 after step 'start'"


def test_a_parallel_loop_lets_its_iterations_in_flight_finish_and_counts_them() -> None:
    s = sim.Sim(
        sim.playbook("""
        executor:
          spec:
            budget: {cost: 1.0}
        workflow:
          - step: start
            tool: {kind: noop}
            loop: {in: "{{ [1, 2, 3, 4, 5] }}", iterator: i, spec: {mode: parallel, max_in_flight: 2}}
    """)
    )
    spend(s, "start", cost=1.5)
    assert s.state.status == st.RUNNING and [c.index for c in s.live("start")] == [1]
    spend(s, "start", cost=0.5)
    assert s.state.status == st.FAILED and s.state.usage.cost == 2.0
    assert [e.payload["index"] for e in s.log if e.event_type == ev.COMMAND_ISSUED] == [0, 1]


def test_no_budget_no_check() -> None:
    s = sim.Sim(sim.playbook(CHAIN.replace("budget: {cost: 5.0, tokens: 1000}", "timeout: 5")))
    spend(s, "start", cost=100.0, tokens=10**6)
    spend(s, "draft")
    spend(s, "publish")
    assert s.state.status == st.COMPLETED
    assert not any(e.event_type == ev.BUDGET_EXCEEDED for e in s.log)


def test_usage_parse_reads_provider_keys_and_ignores_extras() -> None:
    assert usage.parse(
        {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7, "provider": None}, "here"
    ) == [{"provider": "", "model": "", "input_tokens": 3, "output_tokens": 4, "cost": 0.0}]


def test_adding_reports_sums_the_ones_that_hold_entries_among_empty_ones() -> None:
    entry = {"provider": "p", "model": "m", "input_tokens": 3, "output_tokens": 1, "cost": 0.5}
    assert usage.add() == [] and usage.add([], None) == []
    assert usage.add([], [entry], None, [entry]) == [
        {**entry, "input_tokens": 6, "output_tokens": 2, "cost": 1.0}
    ]
