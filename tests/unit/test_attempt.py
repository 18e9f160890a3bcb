"""One attempt of a step (milepost.attempt.runner), table-driven, with a fake tool runner.

The fake runner identifies a task by its python `code` text (a plain label such as `t1`),
records every ToolCall and answers with scripted results per label and execution. `sleep`
is a fake that records the requested delays; nothing here sleeps for real except the
spec.timeout test (about 1.2 s).

DSL sections: 3 (tools, 3.6 workbook), 4 (pipelines), 5 (task policy and the envelope),
7 (writes inside an attempt), 9 (templates), 10 (spec.timeout), 10.4 (idempotency key),
1 (keychain).
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from milepost.attempt.runner import MAX_TASK_EXECUTIONS, run_attempt
from milepost.core.work import AttemptResult, WorkItem
from milepost.playbook import load, model
from milepost.tools.base import ToolCall, ToolFailure, ToolResult

Response = ToolResult | Callable[[ToolCall], ToolResult]

# --------------------------------------------------------------------------- fakes & helpers


class FakeTools:
    """Scripted tool runner: `label -> [response, ...]` (the last response repeats).

    A task's label is its `code` field (python tasks), else its kind. A response is a
    ToolResult or a callable `(call) -> ToolResult`. Unscripted labels answer `{}`.
    """

    def __init__(self, **script: Response | list[Response]) -> None:
        self.script = {k: v if isinstance(v, list) else [v] for k, v in script.items()}
        self.calls: list[ToolCall] = []
        self.counts: Counter[str] = Counter()

    @staticmethod
    def label(call: ToolCall) -> str:
        return str(call.config.get("code", call.kind))

    async def run(self, call: ToolCall) -> ToolResult:
        self.calls.append(call)
        label = self.label(call)
        n = self.counts[label]
        self.counts[label] += 1
        responses = self.script.get(label, [ToolResult(data={})])
        response = responses[min(n, len(responses) - 1)]
        return response(call) if callable(response) else response

    @property
    def labels(self) -> list[str]:
        return [self.label(c) for c in self.calls]

    def call(self, label: str, n: int = 0) -> ToolCall:
        return [c for c in self.calls if self.label(c) == label][n]


class FakeSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t}\n"


def playbook(body: str) -> model.Playbook:
    """`body`: the root keys after metadata (workflow, workbook, keychain...)."""
    return load.load_text(HEADER + textwrap.dedent(body))


def work_item(
    step: str = "x",
    workload: dict[str, Any] | None = None,
    ctx: dict[str, Any] | None = None,
    args: dict[str, Any] | None = None,
    key: str = "idem-key-1",
) -> WorkItem:
    workload = dict(workload or {})
    context = {
        "workload": workload,
        "ctx": dict(ctx or {}),
        "iter": {},
        "execution_id": "1",
        **workload,
    }
    return WorkItem(
        command_id=7,
        execution_id=1,
        step=step,
        run=1,
        index=-1,
        attempt=1,
        idempotency_key=key,
        context=context,
        args=dict(args or {}),
    )


def run(
    pb: model.Playbook,
    item: WorkItem,
    tools: FakeTools,
    sleep: FakeSleep | None = None,
    **kwargs: Any,
) -> AttemptResult:
    sleep = sleep if sleep is not None else FakeSleep()
    return asyncio.run(run_attempt(pb, item, tools, sleep=sleep, **kwargs))


def ok(data: Any = None, **kw: Any) -> ToolResult:
    return ToolResult(data=data, **kw)


def err(
    kind: str = "server_error",
    message: str = "HTTP 500 from GET http://h/x",
    data: Any = None,
    **kw: Any,
) -> ToolResult:
    code = kw.pop("code", "HTTP_500")
    retryable = kw.pop("retryable", True)
    return ToolResult(
        data=data, error=ToolFailure(kind, message, code=code, retryable=retryable), **kw
    )


def echo_input(call: ToolCall) -> ToolResult:
    return ToolResult(data=dict(call.input))


# --------------------------------------------------------------------------- single tool


@pytest.mark.parametrize(
    "data",
    [{"a": 1, "data": [1, 2]}, {"status": "error"}, [1, 2, 3], "text", 42, None, {}],
    ids=["mapping", "status-error-mapping", "list", "str", "int", "none", "empty"],
)
def test_single_tool_result_is_returned_unchanged(data: Any) -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool: {kind: python, code: t1}
    """)
    tools = FakeTools(t1=ok(data))
    out = run(pb, work_item(), tools)
    assert out.ok and out.error is None
    assert out.result == data
    assert out.ctx == {} and out.failed_ok is False
    assert tools.labels == ["t1"]


def test_step_input_is_merged_under_tool_input_tool_wins() -> None:
    pb = playbook("""
        workflow:
          - step: x
            input: {a: "{{ workload.v }}", b: from_step}
            tool: {kind: python, code: t1, input: {b: from_tool, c: "{{ v + 1 }}"}}
    """)
    tools = FakeTools()
    out = run(pb, work_item(workload={"v": 5}), tools)
    assert out.ok, out.error
    assert tools.calls[0].input == {"a": 5, "b": "from_tool", "c": 6}


def test_legacy_args_reach_the_input() -> None:
    pb = playbook("""
        workflow:
          - step: x
            input: {a: step}
            tool: {kind: python, code: t1, input: {b: tool}}
    """)
    tools = FakeTools()
    out = run(pb, work_item(workload={"v": 3}, args={"z": "{{ workload.v * 2 }}"}), tools)
    assert out.ok, out.error
    assert tools.calls[0].input == {"a": "step", "b": "tool", "z": 6}


def test_input_keys_are_visible_while_other_fields_render() -> None:
    pb = playbook("""
        workflow:
          - step: x
            input: {page: 2}
            tool:
              kind: http
              method: POST
              url: "{{ base }}/orders"
              params: {page: "{{ page }}", team: "{{ team }}"}
              headers: {X-Request-Id: "{{ idempotency_key }}"}
              input: {base: "{{ workload.api }}"}
    """)
    tools = FakeTools()
    item = work_item(workload={"api": "http://api.test", "team": "ops"}, key="k-123")
    out = run(pb, item, tools)
    assert out.ok, out.error
    call = tools.calls[0]
    assert call.kind == "http"
    assert call.config["url"] == "http://api.test/orders"
    assert call.config["params"] == {"page": 2, "team": "ops"}
    assert call.config["method"] == "POST"
    assert call.input == {"page": 2, "base": "http://api.test"}
    assert call.config["headers"] == {"X-Request-Id": "k-123"}  # DSL 10.4
    assert "input" not in call.config and "kind" not in call.config


def test_tool_call_carries_idempotency_key_and_identity() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool: {kind: python, code: t1, input: {k: "{{ idempotency_key }}"}}
    """)
    tools = FakeTools()
    key = "ab" * 32
    item = work_item(workload={"idempotency_key": "from-workload"}, key=key)
    out = run(pb, item, tools)
    assert out.ok, out.error
    call = tools.calls[0]
    assert call.idempotency_key == key
    assert call.input == {"k": key}  # reserved name: the engine's value wins (DSL 9.2)
    assert call.execution_id == "1" and call.step == "x"
    assert call.timeout is None  # no spec.timeout, no tool timeout


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        (
            "{kind: python, code: t1, input: {k: '{{ nope }}'}}",
            ["step 'x': input 'k': undefined", "'{{ nope }}'", "nope"],
        ),
        (
            "{kind: python, code: t1, input: {k: 'id-{{ ctx.missing.deeper }}'}}",
            ["step 'x': input 'k': undefined", "{{ ctx.missing.deeper }}"],
        ),
        (
            "{kind: http, url: '{{ nowhere }}/x'}",
            ["step 'x': field 'url': undefined", "{{ nowhere }}/x"],
        ),
    ],
    ids=["input", "input-chained", "tool-field"],
)
def test_undefined_name_in_input_or_field_is_a_template_error(
    tool: str, expected: list[str]
) -> None:
    pb = playbook(f"""
        workflow:
          - step: x
            tool: {tool}
    """)
    tools = FakeTools()
    out = run(pb, work_item(), tools)
    assert not out.ok
    assert out.error is not None and out.error["kind"] == "template"
    for fragment in expected:
        assert fragment in out.error["message"], out.error["message"]
    assert tools.calls == []  # the tool never ran


def test_undefined_name_in_a_pipeline_task_names_the_task() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - {name: a, kind: python, code: a}
              - {name: b, kind: python, code: b, input: {k: "{{ nope }}"}}
    """)
    tools = FakeTools()
    out = run(pb, work_item(), tools)
    assert not out.ok and out.error is not None
    assert out.error["kind"] == "template"
    assert "step 'x' task 'b': input 'k': undefined" in out.error["message"]
    assert out.error["task"] == "b"
    # where and which template, for `milepost doctor` to name without parsing the message
    assert (out.error["where"], out.error["template"]) == (
        "step 'x' task 'b': input 'k'",
        "{{ nope }}",
    )
    assert tools.labels == ["a"]


# --------------------------------------------------------------------------- pipelines


def test_later_tasks_see_earlier_results_by_task_name() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - {name: fetch, kind: python, code: fetch}
              - name: transform
                kind: python
                code: transform
                input:
                  n: "{{ fetch.count }}"
                  via_alias: "{{ fetch.data.count }}"
                  whole: "{{ fetch }}"
                  prev_step: "{{ earlier.v }}"
    """)
    tools = FakeTools(fetch=ok({"count": 3, "items": [1, 2, 3]}))
    item = work_item()
    item.context["earlier"] = {"v": "from-earlier-step"}
    out = run(pb, item, tools)
    assert out.ok, out.error
    assert tools.calls[1].input == {
        "n": 3,
        "via_alias": 3,
        "whole": {"count": 3, "items": [1, 2, 3]},
        "prev_step": "from-earlier-step",
    }
    # python's `context` global also sees the earlier task result
    assert tools.calls[1].context["fetch"] == {"count": 3, "items": [1, 2, 3]}


def test_task_level_set_scopes_local_ctx_and_iter() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - name: t1
                kind: python
                code: t1
                set:
                  local_v: "{{ output.v }}"
                  step.other: "{{ output.v * 10 }}"
                  ctx.shared: "{{ output.v + 1 }}"
                  ctx.nested.deep: "{{ output.data.v }}"
                  iter.it: "{{ output.v + 2 }}"
              - name: t2
                kind: python
                code: t2
                input:
                  a: "{{ local_v }}"
                  b: "{{ other }}"
                  c: "{{ ctx.shared }}"
                  d: "{{ iter.it }}"
                  e: "{{ ctx.nested.deep }}"
                  f: "{{ ctx.kept }}"
    """)
    tools = FakeTools(t1=ok({"v": 1}), t2=echo_input)
    out = run(pb, work_item(ctx={"kept": "old"}), tools)
    assert out.ok, out.error
    assert tools.calls[1].input == {"a": 1, "b": 10, "c": 2, "d": 3, "e": 1, "f": "old"}
    assert tools.calls[1].context["ctx"]["shared"] == 2
    assert tools.calls[1].context["iter"]["it"] == 3
    # only ctx writes are committed; iter and pipeline-local writes are not
    assert out.ctx == {"shared": 2, "nested.deep": 1}
    assert "it" not in out.ctx and "iter.it" not in out.ctx and "local_v" not in out.ctx


def test_task_level_set_on_a_single_tool_commits_ctx() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool: {kind: python, code: t1, set: {ctx.seen: "{{ output.n }}", tmp: 1}}
    """)
    out = run(pb, work_item(), FakeTools(t1=ok({"n": 4})))
    assert out.ok, out.error
    assert out.ctx == {"seen": 4}
    assert out.result == {"n": 4}


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        (
            {"t1": {"a": 1, "b": 1}, "t2": {"b": 2, "c": 2}, "t3": [1, 2]},
            {"t1": {"a": 1, "b": 1}, "t2": {"b": 2, "c": 2}, "t3": [1, 2], "a": 1, "b": 2, "c": 2},
        ),
        (
            {"t1": {"b": 1}, "t2": "text", "t3": {"b": 3}},
            {"t1": {"b": 1}, "t2": "text", "t3": {"b": 3}, "b": 3},
        ),
        (
            {"t1": None, "t2": {"t1": "shadow"}, "t3": {}},
            {"t1": "shadow", "t2": {"t1": "shadow"}, "t3": {}},
        ),
    ],
    ids=["later-wins", "non-mapping-not-merged", "fields-merged-over-names"],
)
def test_pipeline_step_result_merges_mappings_in_finish_order(
    results: dict[str, Any], expected: Any
) -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - {name: t1, kind: python, code: t1}
              - {name: t2, kind: python, code: t2}
              - {name: t3, kind: python, code: t3}
    """)
    tools = FakeTools(**{k: ok(v) for k, v in results.items()})
    out = run(pb, work_item(), tools)
    assert out.ok, out.error
    assert out.result == expected


def test_pipeline_merge_follows_finish_order_not_position() -> None:
    # t1 (b=1) -> t2 (b=2) jumps to t1 -> t1 (b=3) breaks: t1 finished last, so b == 3,
    # and t1's entry is its latest result.
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - name: t1
                kind: python
                code: t1
                spec:
                  policy:
                    rules:
                      - when: "{{ again is defined }}"
                        then: {do: break}
              - name: t2
                kind: python
                code: t2
                spec:
                  policy:
                    rules:
                      - else: {then: {do: jump, to: t1, set: {again: true}}}
              - {name: t3, kind: python, code: t3}
    """)
    tools = FakeTools(t1=[ok({"b": 1, "first": True}), ok({"b": 3})], t2=ok({"b": 2, "c": 2}))
    out = run(pb, work_item(), tools)
    assert out.ok, out.error
    assert tools.labels == ["t1", "t2", "t1"]
    assert out.result == {"t1": {"b": 3}, "t2": {"b": 2, "c": 2}, "b": 3, "c": 2}


def test_one_task_pipeline_exposes_its_fields_at_top_level() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - {name: only, kind: python, code: only}
    """)
    out = run(pb, work_item(), FakeTools(only=ok({"data": {"executed": True}})))
    assert out.ok, out.error
    assert out.result == {"only": {"data": {"executed": True}}, "data": {"executed": True}}


def test_unnamed_pipeline_tasks_are_task_index() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - {kind: python, code: a}
              - {kind: python, code: b, input: {prev: "{{ task_0.v }}"}}
    """)
    tools = FakeTools(a=ok({"v": 9}), b=echo_input)
    out = run(pb, work_item(), tools)
    assert out.ok, out.error
    assert out.result == {"task_0": {"v": 9}, "task_1": {"prev": 9}, "v": 9, "prev": 9}


# --------------------------------------------------------------------------- policies: retry


def _retry_playbook(then: str) -> model.Playbook:
    return playbook(f"""
        workflow:
          - step: x
            tool:
              kind: python
              code: t1
              spec:
                policy:
                  rules:
                    - when: "{{{{ output.status == 'error' }}}}"
                      then: {then}
    """)


@pytest.mark.parametrize(
    ("then", "expected_sleeps"),
    [
        ("{do: retry, attempts: 4, backoff: fixed, delay: 2}", [2.0, 2.0, 2.0]),
        ("{do: retry, attempts: 4, backoff: linear, delay: 0.5}", [0.5, 1.0, 1.5]),
        ("{do: retry, attempts: 5, backoff: exponential, delay: 1.0}", [1.0, 2.0, 4.0, 8.0]),
        ("{do: retry, attempts: 4, backoff: exponential, delay: 0.25}", [0.25, 0.5, 1.0]),
        ("{do: retry, attempts: 3, delay: 1.5}", [1.5, 1.5]),  # delay given: fixed
        ("{do: retry, delay: 3}", [3.0, 3.0]),  # attempts default 3
        ("{do: retry, attempts: 3, backoff: none, delay: 5}", [0.0, 0.0]),
        ("{do: retry, attempts: 3}", [0.0, 0.0]),  # no delay: none
        ("{do: retry, attempts: 1, backoff: fixed, delay: 5}", []),  # one execution only
    ],
    ids=[
        "fixed",
        "linear",
        "exponential",
        "exponential-fraction",
        "default-fixed",
        "default-attempts",
        "none",
        "default-none",
        "attempts-1",
    ],
)
def test_retry_waits_follow_the_backoff_formula(then: str, expected_sleeps: list[float]) -> None:
    attempts = len(expected_sleeps) + 1
    tools = FakeTools(t1=err())  # always fails: every retry is spent
    sleep = FakeSleep()
    out = run(_retry_playbook(then), work_item(), tools, sleep)
    assert not out.ok
    assert tools.labels == ["t1"] * attempts
    # a wait of 0 may be a sleep(0) call or no call at all
    assert [d for d in sleep.delays if d] == pytest.approx([d for d in expected_sleeps if d])
    assert len(sleep.delays) <= attempts - 1


@pytest.mark.parametrize(
    ("then", "retry_after", "expected_sleeps"),
    [
        ("{do: retry, attempts: 3, backoff: fixed, delay: 1}", 7.5, [7.5, 7.5]),
        ("{do: retry, attempts: 4, backoff: exponential, delay: 5}", 7.0, [7.0, 10.0, 20.0]),
        ("{do: retry, attempts: 3}", 2.0, [2.0, 2.0]),
        ("{do: retry, attempts: 3, backoff: linear, delay: 4}", 0.5, [4.0, 8.0]),
    ],
    ids=["fixed-below", "exponential-crosses", "none", "linear-above"],
)
def test_retry_never_waits_less_than_retry_after(
    then: str, retry_after: float, expected_sleeps: list[float]
) -> None:
    tools = FakeTools(
        t1=err("rate_limit", "HTTP 429 from GET http://h", code="HTTP_429", retry_after=retry_after)
    )
    sleep = FakeSleep()
    out = run(_retry_playbook(then), work_item(), tools, sleep)
    assert not out.ok
    assert sleep.delays == pytest.approx(expected_sleeps)


def test_retry_until_success_returns_the_successful_result() -> None:
    tools = FakeTools(t1=[err(), err(), ok({"done": True})])
    sleep = FakeSleep()
    out = run(
        _retry_playbook("{do: retry, attempts: 5, backoff: linear, delay: 1}"),
        work_item(),
        tools,
        sleep,
    )
    assert out.ok, out.error
    assert out.result == {"done": True}
    assert out.failed_ok is False
    assert tools.labels == ["t1"] * 3
    assert sleep.delays == [1.0, 2.0]


def test_retry_exhausted_fails_with_the_tools_error() -> None:
    response = {"status_code": 503, "data": "busy"}
    tools = FakeTools(
        t1=err("server_error", "HTTP 503 from GET http://h/x", code="HTTP_503", data=response)
    )
    out = run(_retry_playbook("{do: retry, attempts: 3}"), work_item(), tools)
    assert not out.ok and out.error is not None
    assert out.error["kind"] == "server_error"
    assert out.error["message"] == "HTTP 503 from GET http://h/x"
    assert out.error["code"] == "HTTP_503"
    assert out.error["retryable"] is True
    assert out.result == response
    assert out.ctx == {}
    assert len(tools.calls) == 3


def test_retry_requested_on_ok_results_exhausted_fails_readably() -> None:
    # polling: retry while the job is not done; never done -> the task fails after
    # `attempts` executions with a policy error that says why (there is no tool error)
    pb = playbook("""
        workflow:
          - step: x
            tool:
              kind: python
              code: t1
              spec:
                policy:
                  rules:
                    - when: "{{ output.data.state != 'done' }}"
                      then: {do: retry, attempts: 3, delay: 2}
    """)
    tools = FakeTools(t1=ok({"state": "pending"}))
    sleep = FakeSleep()
    out = run(pb, work_item(), tools, sleep)
    assert not out.ok and out.error is not None
    assert len(tools.calls) == 3 and sleep.delays == [2.0, 2.0]
    assert out.error["kind"] == "policy"
    assert "attempts" in out.error["message"]


def test_attempt_number_is_available_in_rules_and_envelope() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              kind: python
              code: t1
              spec:
                policy:
                  rules:
                    - when: "{{ _attempt < 3 }}"
                      then: {do: retry, attempts: 10}
                    - else:
                        then:
                          do: continue
                          set: {ctx.att: "{{ _attempt }}", ctx.meta_att: "{{ output.meta.attempt }}"}
    """)
    tools = FakeTools(t1=ok({"v": 1}))
    out = run(pb, work_item(), tools)
    assert out.ok, out.error
    assert len(tools.calls) == 3
    assert out.ctx == {"att": 3, "meta_att": 3}


# --------------------------------------------------------------------------- policies: actions


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (ok({"v": 1}), {"kind": "policy", "message": "policy requested fail"}),
        (
            err("client_error", "HTTP 400 from POST http://h", code="HTTP_400", retryable=False),
            {"kind": "client_error", "message": "HTTP 400 from POST http://h", "code": "HTTP_400"},
        ),
    ],
    ids=["on-ok", "on-error"],
)
def test_fail_action(result: ToolResult, expected: dict[str, Any]) -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - name: t1
                kind: python
                code: t1
                set: {ctx.never: 1}
                spec: {policy: {rules: [{else: {then: {do: fail, set: {ctx.never2: 1}}}}]}}
              - {name: t2, kind: python, code: t2}
    """)
    tools = FakeTools(t1=result)
    out = run(pb, work_item(), tools)
    assert not out.ok and out.error is not None
    for key, value in expected.items():
        assert out.error[key] == value
    assert out.error["task"] == "t1"
    assert out.ctx == {}
    assert tools.labels == ["t1"]


def test_continue_on_error_is_ok_with_failed_ok_and_set_sees_null_output() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - name: t1
                kind: python
                code: t1
                set: {ctx.out: "{{ output }}", ctx.out_given: "{{ output is none }}"}
                spec:
                  policy:
                    rules:
                      - when: "{{ output.status == 'error' }}"
                        then:
                          do: continue
                          set: {ctx.env_status: "{{ output.status }}",
                                ctx.env_kind: "{{ output.error.kind }}",
                                ctx.env_msg: "{{ output.error.message }}"}
              - {name: t2, kind: python, code: t2, input: {seen: "{{ ctx.env_kind }}"}}
    """)
    tools = FakeTools(
        t1=err("exception", "ValueError: boom", code="ValueError", retryable=False), t2=echo_input
    )
    out = run(pb, work_item(), tools)
    assert out.ok, out.error
    assert out.failed_ok is True
    assert out.error is None
    assert out.ctx == {
        "out": None,
        "out_given": True,
        "env_status": "error",
        "env_kind": "exception",
        "env_msg": "ValueError: boom",
    }
    assert tools.labels == ["t1", "t2"]
    assert tools.calls[1].input == {"seen": "exception"}


def test_break_skips_the_remaining_tasks() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - {name: t1, kind: python, code: t1}
              - name: t2
                kind: python
                code: t2
                set: {ctx.t2_set: "{{ output.v }}"}
                spec: {policy: {rules: [{when: "{{ output.data.v == 2 }}", then: {do: break, set: {ctx.why: stop}}}]}}
              - {name: t3, kind: python, code: t3, set: {ctx.t3: 1}}
    """)
    tools = FakeTools(t1=ok({"v": 1}), t2=ok({"v": 2}))
    out = run(pb, work_item(), tools)
    assert out.ok, out.error
    assert tools.labels == ["t1", "t2"]
    assert out.ctx == {"why": "stop", "t2_set": 2}
    assert out.result == {"t1": {"v": 1}, "t2": {"v": 2}, "v": 2}
    assert "t3" not in out.result


def test_jump_to_a_named_task_with_a_counter_terminates() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - {name: init, kind: python, code: init}
              - {name: page, kind: python, code: page, input: {n: "{{ count | default(0) }}"}}
              - name: check
                kind: python
                code: check
                spec:
                  policy:
                    rules:
                      - when: "{{ (count | default(0)) < 2 }}"
                        then: {do: jump, to: page, set: {count: "{{ (count | default(0)) + 1 }}"}}
                      - else: {then: {do: continue, set: {ctx.pages: "{{ count }}"}}}
    """)
    tools = FakeTools(page=echo_input)
    out = run(pb, work_item(), tools)
    assert out.ok, out.error
    assert tools.labels == ["init", "page", "check", "page", "check", "page", "check"]
    assert [c.input["n"] for c in tools.calls if tools.label(c) == "page"] == [0, 1, 2]
    assert out.ctx == {"pages": 2}
    assert out.result["page"] == {"n": 2}


def test_jump_to_previous_with_a_counter_terminates() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - {name: a, kind: python, code: a}
              - name: b
                kind: python
                code: b
                spec:
                  policy:
                    rules:
                      - when: "{{ (n | default(0)) < 3 }}"
                        then: {do: jump, to: previous, set: {n: "{{ (n | default(0)) + 1 }}"}}
              - {name: c, kind: python, code: c, input: {n: "{{ n }}"}}
    """)
    tools = FakeTools(c=echo_input)
    out = run(pb, work_item(), tools)
    assert out.ok, out.error
    assert tools.labels == ["a", "b", "a", "b", "a", "b", "a", "b", "c"]
    assert out.result["c"] == {"n": 3}


def test_then_set_sees_the_envelope() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              kind: http
              url: http://h/x
              spec:
                policy:
                  rules:
                    - else:
                        then:
                          do: continue
                          set:
                            ctx.status: "{{ output.status }}"
                            ctx.data_id: "{{ output.data.data.id }}"
                            ctx.data_code: "{{ output.data.status_code }}"
                            ctx.error: "{{ output.error }}"
                            ctx.attempt: "{{ output.meta.attempt }}"
                            ctx.http_status: "{{ output.http.status }}"
                            ctx.ctype: "{{ output.http.headers['content-type'] }}"
                            ctx.duration: "{{ output.meta.duration_ms }}"
    """)
    response = {"status_code": 201, "data": {"id": 9}, "body": {"id": 9}, "headers": {}}
    result = ok(
        response,
        http={"status": 201, "headers": {"content-type": "application/json"}},
        duration_ms=12.5,
    )
    tools = FakeTools(http=result)
    out = run(pb, work_item(), tools)
    assert out.ok, out.error
    # output.data is the task's result (the response); output.data.data its own `data` key
    assert out.ctx == {
        "status": "ok",
        "data_id": 9,
        "data_code": 201,
        "error": None,
        "attempt": 1,
        "http_status": 201,
        "ctype": "application/json",
        "duration": 12.5,
    }
    assert out.result == response


def test_then_set_sees_the_error_envelope() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              kind: http
              url: http://h/x
              spec:
                policy:
                  rules:
                    - when: "{{ output.error.kind == 'not_found' }}"
                      then:
                        do: continue
                        set:
                          ctx.kind: "{{ output.error.kind }}"
                          ctx.code: "{{ output.error.code }}"
                          ctx.estatus: "{{ output.error.status }}"
                          ctx.retryable: "{{ output.error.retryable }}"
                          ctx.http_status: "{{ output.http.status }}"
                          ctx.body: "{{ output.data.body }}"
    """)
    tools = FakeTools(
        http=ToolResult(
            data={"status_code": 404, "body": "nope"},
            error=ToolFailure(
                "not_found", "HTTP 404 from GET http://h/x", code="HTTP_404", status=404
            ),
            http={"status": 404, "headers": {}},
        )
    )
    out = run(pb, work_item(), tools)
    assert out.ok, out.error
    assert out.failed_ok is True
    assert out.ctx == {
        "kind": "not_found",
        "code": "HTTP_404",
        "estatus": 404,
        "retryable": False,
        "http_status": 404,
        "body": "nope",
    }


def test_envelope_has_no_http_key_for_non_http_results() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              kind: python
              code: t1
              spec:
                policy:
                  rules:
                    - else: {then: {set: {ctx.has_http: "{{ output.http is defined }}",
                                          ctx.keys: "{{ output.keys() | sort | list }}"}}}
    """)
    out = run(pb, work_item(), FakeTools(t1=ok(1)))
    assert out.ok, out.error
    assert out.ctx == {"has_http": False, "keys": ["data", "error", "meta", "status"]}


@pytest.mark.parametrize(
    ("on_unmatched", "result", "ok_expected", "failed_ok", "message"),
    [
        ("continue", err(), True, True, None),
        ("continue", ok({"v": 1}), True, False, None),
        ("fail", ok({"v": 1}), False, False, "policy requested fail"),
        ("fail", err(), False, False, "HTTP 500 from GET http://h/x"),
        (None, ok({"v": 1}), True, False, None),
        (None, err(), False, False, "HTTP 500 from GET http://h/x"),
    ],
    ids=["continue-error", "continue-ok", "fail-ok", "fail-error", "default-ok", "default-error"],
)
def test_on_unmatched(
    on_unmatched: str | None,
    result: ToolResult,
    ok_expected: bool,
    failed_ok: bool,
    message: str | None,
) -> None:
    unmatched = f", on_unmatched: {on_unmatched}" if on_unmatched else ""
    pb = playbook(f"""
        workflow:
          - step: x
            tool:
              - name: t1
                kind: python
                code: t1
                spec: {{policy: {{rules: [{{when: "{{{{ output.data.never }}}}", then: {{do: fail}}}}]{unmatched}}}}}
              - {{name: t2, kind: python, code: t2}}
    """)
    tools = FakeTools(t1=result)
    out = run(pb, work_item(), tools)
    assert out.ok is ok_expected, out.error
    assert out.failed_ok is failed_ok
    if ok_expected:
        assert tools.labels == ["t1", "t2"]
    else:
        assert out.error is not None and out.error["message"] == message
        assert tools.labels == ["t1"]


@pytest.mark.parametrize(
    ("result", "ok_expected", "labels"),
    [(ok({"v": 1}), True, ["t1", "t2"]), (err(), False, ["t1"])],
    ids=["ok-continues", "error-fails"],
)
def test_no_policy(result: ToolResult, ok_expected: bool, labels: list[str]) -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - {name: t1, kind: python, code: t1}
              - {name: t2, kind: python, code: t2}
    """)
    tools = FakeTools(t1=result)
    sleep = FakeSleep()
    out = run(pb, work_item(), tools, sleep)
    assert out.ok is ok_expected
    assert tools.labels == labels
    assert sleep.delays == []
    if not ok_expected:
        assert out.error is not None
        assert out.error["kind"] == "server_error" and out.error["task"] == "t1"


def test_task_execution_cap_ends_a_jump_loop_with_a_policy_error() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - {name: a, kind: python, code: a}
              - name: b
                kind: python
                code: b
                spec: {policy: {rules: [{else: {then: {do: jump, to: a}}}]}}
    """)
    tools = FakeTools()
    out = run(pb, work_item(), tools)
    assert not out.ok and out.error is not None
    assert out.error["kind"] == "policy"
    assert str(MAX_TASK_EXECUTIONS) in out.error["message"]
    assert len(tools.calls) == MAX_TASK_EXECUTIONS == 10_000


# --------------------------------------------------------------------------- writes on failure


def test_writes_are_discarded_when_a_later_task_fails() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - name: t1
                kind: python
                code: t1
                set: {ctx.x: written, iter.y: 1}
                spec: {policy: {rules: [{else: {then: {set: {ctx.z: also}}}}]}}
              - {name: t2, kind: python, code: t2, input: {saw: "{{ ctx.x }}"}}
    """)
    tools = FakeTools(t2=err("exception", "RuntimeError: late", code="RuntimeError"))
    out = run(pb, work_item(ctx={"x": "before"}), tools)
    assert tools.calls[1].input == {"saw": "written"}  # visible at once inside the attempt
    assert not out.ok
    assert out.ctx == {}  # nothing committed
    assert out.error is not None and out.error["message"] == "RuntimeError: late"


def test_set_render_error_fails_the_attempt_as_template_error() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool:
              - {name: t1, kind: python, code: t1, set: {ctx.bad: "{{ output.v | int(1, 2, 3, 4) }}"}}
              - {name: t2, kind: python, code: t2}
    """)
    tools = FakeTools(t1=ok({"v": 1}))
    out = run(pb, work_item(), tools)
    assert not out.ok and out.error is not None
    assert out.error["kind"] == "template"
    assert "ctx.bad" in out.error["message"]
    assert out.ctx == {}
    assert tools.labels == ["t1"]


# --------------------------------------------------------------------------- workbook


def test_workbook_task_runs_the_entry_with_caller_input_in_caller_context() -> None:
    pb = playbook("""
        workbook:
          - name: compute
            desc: entry
            tool:
              kind: http
              url: "{{ base }}/t/{{ temperature_c }}"
              input: {temperature_c: null, unit: C, base: "{{ workload.api }}", d: entry}
        workflow:
          - step: x
            input: {d: step}
            tool:
              - {name: prep, kind: python, code: prep}
              - {name: compute, kind: workbook, input: {temperature_c: "{{ prep.t }}"}}
    """)
    tools = FakeTools(prep=ok({"t": 31}), http=echo_input)
    out = run(pb, work_item(workload={"api": "http://api"}), tools)
    assert out.ok, out.error
    call = tools.calls[1]
    assert call.kind == "http"
    assert call.input == {"temperature_c": 31, "unit": "C", "base": "http://api", "d": "entry"}
    assert call.config["url"] == "http://api/t/31"
    assert "name" not in call.config


def test_single_workbook_tool_result_is_the_entrys_result() -> None:
    pb = playbook("""
        workbook:
          - name: flag
            tool: {kind: python, code: flag, input: {temperature_c: null}}
        workflow:
          - step: x
            tool: {kind: workbook, name: flag, input: {temperature_c: "{{ t }}"}}
    """)
    tools = FakeTools(flag=lambda c: ok({"is_hot": c.input["temperature_c"] >= 25}))
    out = run(pb, work_item(workload={"t": 30}), tools)
    assert out.ok, out.error
    assert out.result == {"is_hot": True}
    assert tools.calls[0].kind == "python"


@pytest.mark.parametrize(
    ("caller_spec", "expected"),
    [("", 5.0), (", spec: {timeout: 2s}", 2.0)],
    ids=["entry-timeout", "caller-wins"],
)
def test_workbook_entry_tool_timeout_is_passed_to_the_tool(
    caller_spec: str, expected: float
) -> None:
    pb = playbook(f"""
        workbook:
          - name: wb
            tool: {{kind: python, code: wb, spec: {{timeout: 5s}}}}
        workflow:
          - step: x
            tool: {{kind: workbook, name: wb{caller_spec}}}
    """)
    tools = FakeTools()
    out = run(pb, work_item(), tools)
    assert out.ok, out.error
    assert tools.calls[0].timeout == expected


# --------------------------------------------------------------------------- spec.timeout


class HangingTools(FakeTools):
    async def run(self, call: ToolCall) -> ToolResult:
        self.calls.append(call)
        await asyncio.Event().wait()  # never set
        raise AssertionError("unreachable")


def test_spec_timeout_ends_a_hanging_tool_with_a_timeout_error() -> None:
    pb = playbook("""
        workflow:
          - step: x
            spec: {timeout: 0.2s}
            tool: {kind: python, code: t1}
    """)
    tools = HangingTools()
    started = time.monotonic()
    out = run(pb, work_item(), tools)
    elapsed = time.monotonic() - started
    assert not out.ok and out.error is not None
    assert out.error["kind"] == "timeout"
    assert out.error["retryable"] is True
    assert elapsed < 5.0
    assert tools.calls[0].timeout is not None and 0 < tools.calls[0].timeout <= 0.2


def test_task_timeout_is_passed_to_the_tool() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool: {kind: python, code: t1, spec: {timeout: 5s}}
    """)
    tools = FakeTools()
    out = run(pb, work_item(), tools)
    assert out.ok, out.error
    assert tools.calls[0].timeout == 5.0


# --------------------------------------------------------------------------- keychain

SECRET = "s3cr3t-value"


def _keychain_playbook(tool_extra: str = "") -> model.Playbook:
    return playbook(f"""
        keychain:
          - {{name: api, kind: static, map: {{key: "{SECRET}"}}}}
        workflow:
          - step: x
            tool:
              kind: http
              url: http://h/x
              headers: {{Authorization: "Bearer {{{{ keychain.api.key }}}}"}}
              {tool_extra}
    """)


def _leaky(call: ToolCall) -> ToolResult:
    auth = call.config["headers"]["Authorization"]
    return ToolResult(data={"echo": auth, "nested": [auth, {"k": auth}]})


def test_keychain_secret_reaches_the_tool_but_not_the_outcome() -> None:
    pb = _keychain_playbook('set: {ctx.leak: "{{ output.echo }}", ctx.plain: keep}')
    tools = FakeTools(http=_leaky)
    item = work_item()
    out = run(pb, item, tools)
    assert out.ok, out.error
    call = tools.calls[0]
    assert call.config["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert "keychain" not in call.context
    assert SECRET not in repr(call.context)
    assert out.result == {"echo": "Bearer ***", "nested": ["Bearer ***", {"k": "Bearer ***"}]}
    assert out.ctx == {"leak": "Bearer ***", "plain": "keep"}
    assert SECRET not in repr(out)
    assert "keychain" not in item.context  # the caller's item is not changed


def test_keychain_secret_is_masked_in_errors() -> None:
    pb = _keychain_playbook()

    def fails(call: ToolCall) -> ToolResult:
        auth = call.config["headers"]["Authorization"]
        return ToolResult(
            data={"sent": auth}, error=ToolFailure("auth", f"HTTP 401 with {auth}", code="HTTP_401")
        )

    tools = FakeTools(http=fails)
    out = run(pb, work_item(), tools)
    assert not out.ok and out.error is not None
    assert out.error["kind"] == "auth"
    assert out.error["message"] == "HTTP 401 with Bearer ***"
    assert out.result == {"sent": "Bearer ***"}
    assert SECRET not in repr(out)


def test_keychain_numeric_looking_secret_is_masked_too() -> None:
    # a templated keychain value is coerced like any rendered value (DSL 9.3): a PIN
    # such as "98765432" becomes an int, and must still be masked in text
    pb = playbook("""
        keychain:
          - {name: bank, kind: static, map: {pin: "{{ workload.pin }}"}}
        workflow:
          - step: x
            tool: {kind: python, code: t1, input: {pin: "{{ keychain.bank.pin }}"}}
    """)
    tools = FakeTools(
        t1=lambda c: ToolResult(
            data={"msg": f"pin {c.input['pin']} rejected"},
            error=ToolFailure("exception", f"ValueError: bad pin {c.input['pin']}"),
        )
    )
    out = run(pb, work_item(workload={"pin": "98765432"}), tools)
    assert not out.ok and out.error is not None
    assert "98765432" not in repr(out.error) and "98765432" not in repr(out.result)
    assert out.error["message"] == "ValueError: bad pin ***"


def test_keychain_bearer_and_credential_entries_resolve() -> None:
    pb = playbook("""
        keychain:
          - {name: tok, kind: bearer, token: "{{ workload.tok }}"}
          - {name: db, kind: credential, credential: my_db}
        workflow:
          - step: x
            tool:
              kind: python
              code: t1
              input: {t: "{{ keychain.tok.token }}", p: "{{ keychain.db.password }}"}
    """)
    looked_up: list[str] = []

    def credentials(name: str) -> dict[str, Any] | None:
        looked_up.append(name)
        return {"user": "app", "password": "pa55word!"} if name == "my_db" else None

    tools = FakeTools(t1=echo_input)
    out = run(pb, work_item(workload={"tok": "tok-abcdef"}), tools, credentials=credentials)
    assert out.ok, out.error
    assert looked_up == ["my_db"]
    assert tools.calls[0].input == {"t": "tok-abcdef", "p": "pa55word!"}
    assert out.result == {"t": "***", "p": "***"}


def test_a_credentials_host_and_user_are_not_secrets_its_password_is() -> None:
    pb = playbook("""
        keychain:
          - {name: db, kind: credential, credential: my_db}
        workflow:
          - step: x
            tool:
              kind: python
              code: t1
              input: {h: "{{ keychain.db.host }}", u: "{{ keychain.db.user }}",
                      p: "{{ keychain.db.password }}"}
    """)
    data = {
        "type": "postgres",
        "host": "db.internal",
        "port": 5432,
        "user": "etl",
        "password": "pa55word!",
        "database": "sales",
        "schema": "public",
        "dsn": "postgresql://etl:dsn-pa55@db.internal/sales",
    }
    tools = FakeTools(
        t1=lambda c: ok(
            f"connected to {c.input['h']} as {c.input['u']} "
            f"({c.input['p']}, dsn-pa55) on sales.public postgres"
        )
    )
    out = run(pb, work_item(), tools, credentials={"my_db": data}.get)
    assert out.ok, out.error
    assert out.result == "connected to db.internal as etl (***, ***) on sales.public postgres"


@pytest.mark.parametrize(
    "data",
    [
        {"type": "header", "X-Api-Key": "k3y-v4lue-1"},
        {"type": "aws", "aws_access_key_id": "id-v4lue-1", "aws_secret_access_key": "k3y-v4lue-1"},
        {"type": "oauth", "clientSecret": "k3y-v4lue-1", "accessToken": "k3y-v4lue-2"},
        {"type": "api_key", "value": "k3y-v4lue-1", "in": "header", "name": "X-Key"},
        {"type": "multi", "keys": [{"name": "a", "signing_key": "k3y-v4lue-1"}]},
    ],
)
def test_every_credential_field_but_the_public_ones_is_a_secret(data: dict[str, Any]) -> None:
    """A field named nowhere (`X-Api-Key`, `clientSecret`...) is masked: only the fields
    that say where and as whom are shown, never the reverse."""
    pb = playbook("""
        keychain:
          - {name: c, kind: credential, credential: cred}
        workflow:
          - step: x
            tool: {kind: python, code: t1, input: {all: "{{ keychain.c | tojson }}"}}
    """)
    tools = FakeTools(t1=lambda c: ok(c.input["all"]))
    out = run(pb, work_item(), tools, credentials={"cred": data}.get)
    assert out.ok, out.error
    assert "v4lue" not in str(out.result) and "***" in str(out.result)
    assert out.result["type"] == data["type"]  # what is public stays readable


def test_what_looks_like_a_secret_is_masked_without_a_keychain() -> None:
    pb = playbook("""
        workflow:
          - step: x
            tool: {kind: python, code: t1}
    """)
    token = "ghp_" + "a1B2c3D4e5" * 4
    tools = FakeTools(
        t1=ToolResult(
            data={"h": f"Bearer tok-{token}", "t": token},
            error=ToolFailure("exception", f"bad {token}"),
        )
    )
    out = run(pb, work_item(), tools)
    assert out.result == {"h": "Bearer ***", "t": "ghp_***"}
    assert out.error is not None and out.error["message"] == "bad ghp_***"


def test_a_tool_gets_the_attempts_redaction_for_what_it_logs() -> None:
    pb = _keychain_playbook()
    tools = FakeTools()
    run(pb, work_item(), tools)
    call = tools.calls[0]
    assert call.redact(f"printed {SECRET} and Bearer abc-12345678") == "printed *** and Bearer ***"
    assert (call.execution_id, call.step, call.command_id) == ("1", "x", 7)
    assert call.where() == " (execution 1 step x command 7)"


@pytest.mark.parametrize("with_lookup", [False, True], ids=["no-lookup", "not-registered"])
def test_keychain_missing_credential_is_a_keychain_error(with_lookup: bool) -> None:
    pb = playbook("""
        keychain:
          - {name: api, kind: credential, credential: my_api_cred}
        workflow:
          - step: x
            tool: {kind: python, code: t1}
    """)
    tools = FakeTools()
    kwargs: dict[str, Any] = {"credentials": (lambda name: None)} if with_lookup else {}
    out = run(pb, work_item(), tools, **kwargs)
    assert not out.ok and out.error is not None
    assert out.error["kind"] == "keychain"
    assert "my_api_cred" in out.error["message"]
    assert tools.calls == []


def test_keychain_template_error_is_a_keychain_error() -> None:
    pb = playbook("""
        keychain:
          - {name: api, kind: static, map: {key: "{{ workload.missing | int(1, 2, 3, 4) }}"}}
        workflow:
          - step: x
            tool: {kind: python, code: t1}
    """)
    tools = FakeTools()
    out = run(pb, work_item(), tools)
    assert not out.ok and out.error is not None
    assert out.error["kind"] == "keychain"
    assert "keychain 'api'" in out.error["message"]
    assert tools.calls == []


def test_a_keychain_error_is_redacted_of_the_workloads_secrets() -> None:
    pb = playbook("""
        keychain:
          - {name: api, kind: static, map: {key: "{{ workload[workload.api_token] }}"}}
        workflow:
          - step: x
            tool: {kind: python, code: t1}
    """)
    # the error names the missing key: the workload's secret value
    out = run(pb, work_item(workload={"api_token": "tok-9f8e7d6c5b"}), FakeTools())
    assert out.error is not None and out.error["kind"] == "keychain"
    assert "tok-9f8e7d6c5b" not in repr(out) and "***" in out.error["message"]


def test_a_crash_is_an_internal_outcome_logged_without_the_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def crashes(call: ToolCall) -> ToolResult:
        raise RuntimeError(f"bug near {call.config['headers']['Authorization']}")

    with caplog.at_level("ERROR", logger="milepost.attempt.runner"):
        out = run(_keychain_playbook(), work_item(step="x"), FakeTools(http=crashes))
    assert not out.ok and out.error == {
        "kind": "internal",
        "message": "RuntimeError: bug near Bearer ***",
    }
    [record] = [r for r in caplog.records if getattr(r, "action", "") == "attempt_crashed"]
    assert (record.execution_id, record.step) == ("1", "x")  # type: ignore[attr-defined]
    assert record.exc_info is None  # the traceback is in the message, redacted
    assert "Traceback" in record.getMessage() and "RuntimeError" in record.getMessage()
    assert SECRET not in record.getMessage()
