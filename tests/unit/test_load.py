"""playbook.load: the conformance playbooks load, bad playbooks are rejected with every
problem at once, and legacy forms become the canonical model plus a warning."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from milepost.errors import PlaybookInvalid
from milepost.playbook import load, model
from milepost.playbook.yamllines import Limits
from tests.shared import PLAYBOOKS, needs_shared

CONFORMANCE = PLAYBOOKS
GOOD = sorted(p for p in CONFORMANCE.rglob("*.yaml") if "broken_playbooks" not in p.parts)
BROKEN = CONFORMANCE / "broken_playbooks" / "should_error_tool_is_required.yaml"
needs_conformance = needs_shared


def conformance(relpath: str) -> model.Playbook:
    return load.load_file(CONFORMANCE / relpath)


def doc(workflow: str, head: str = "") -> str:
    """A playbook document: the standard header (lines 1-3), `head`, then `workflow`."""
    body = textwrap.indent(textwrap.dedent(workflow).strip("\n"), "  ")
    return (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t}\n"
        f"{textwrap.dedent(head).lstrip()}workflow:\n{body}\n"
    )


def problems(text: str, limits: Limits | None = None) -> list[str]:
    with pytest.raises(PlaybookInvalid) as info:
        load.load_text(text, source="inline.yaml", limits=limits)
    assert info.value.source == "inline.yaml"
    return info.value.problems


# --------------------------------------------------------------------------- conformance


@pytest.mark.parametrize("path", GOOD, ids=lambda p: str(p.relative_to(CONFORMANCE)))
def test_conformance_playbook_loads(path: Path) -> None:
    playbook = load.load_file(path)
    assert playbook.steps
    assert playbook.entry_step in playbook.steps
    assert playbook.source == str(path)
    assert playbook.path == yaml.safe_load(path.read_text())["metadata"]["path"]


@needs_conformance
def test_broken_playbook_is_rejected_with_both_problems_in_one_error() -> None:
    with pytest.raises(PlaybookInvalid) as info:
        load.load_file(BROKEN)
    found = info.value.problems
    assert re.search(r"(?is)tool.*required", str(info.value))
    assert "step 'end': field 'tool' is required (line 39)" in found
    assert (
        "step 'insert_report': unknown field 'command' (did you mean tool.command?) (line 29)"
        in found
    )
    assert info.value.source == str(BROKEN)


@needs_conformance
def test_control_flow_workbook__join_and_reaches() -> None:
    pb = conformance("control_flow_workbook/control_flow_workbook.yaml")
    assert pb.joins == {"end"}
    assert pb.reaches["end"] == {
        "start",
        "eval_flag",
        "hot_path",
        "cold_path",
        "hot_task_a",
        "hot_task_b",
        "cold_task",
    }
    assert pb.steps["hot_path"].next.mode == "inclusive"
    assert [a.step for a in pb.steps["hot_path"].next.arcs] == ["hot_task_a", "hot_task_b"]
    entry = pb.workbook["compute_flag"]
    assert entry.task.kind == "python"
    assert entry.task.input == {"temperature_c": None}
    (call,) = pb.steps["eval_flag"].tasks
    assert (call.kind, call.config, call.input) == (
        "workbook",
        {"name": "compute_flag"},
        {"temperature_c": "{{ temperature_c }}"},
    )
    assert pb.warnings == ()


@needs_conformance
def test_start_with_action__one_task_pipeline() -> None:
    start = conformance("test_start_with_action.yaml").steps["start"]
    assert start.pipeline is True
    (task,) = start.tasks
    assert task.name == "init_action"
    assert task.input == {"input_data": "{{ workload }}"}
    assert "code" in task.config
    (arc,) = start.next.arcs
    assert arc.set == {"ctx.from_start": "{{ start.data.executed }}"}


@needs_conformance
def test_heavy_loop_aggregation__then_less_else_accepted_with_warning() -> None:
    pb = conformance("load_test/heavy_loop_aggregation/heavy_loop_aggregation.yaml")
    (task,) = pb.steps["process_items"].tasks
    assert task.policy is not None
    (rule,) = task.policy.rules
    assert rule.when is None
    assert rule.then.do == "continue"
    assert rule.then.set == {"ctx.loop_results": "{{ output.data.loop_results }}"}
    assert any("step 'process_items'" in w and "without 'then:'" in w for w in pb.warnings), (
        pb.warnings
    )


@needs_conformance
def test_pagination_basic__parallel_loop_and_policy() -> None:
    step = conformance("pagination/basic/test_pagination_basic.yaml").steps["run_probes"]
    assert step.loop is not None
    assert step.loop.mode == "parallel"
    assert step.loop.max_in_flight == 5
    assert step.loop.iterator == "item"
    assert step.loop.in_ == "{{ ctx.probe_delays }}"
    (task,) = step.tasks
    assert step.pipeline is False
    assert task.name == "run_probes"
    assert task.policy is not None
    retry, fail, other = task.policy.rules
    assert retry.then == model.PolicyThen(do="retry", attempts=3, backoff="fixed", delay=0.5)
    assert fail.then.do == "fail"
    assert other.when is None and other.then.do == "continue"
    assert task.config["params"] == {
        "delay_seconds": "{{ iter.item }}",
        "label": "pagination-basic",
    }


@needs_conformance
def test_back_edges_and_exclusive_joins() -> None:
    offset = conformance("pagination/offset/test_pagination_offset.yaml")
    assert offset.joins == {"fetch_page"}
    assert offset.reaches["fetch_page"] == {"start", "check_pagination"}
    comprehensive = conformance("comprehensive_test.yaml")
    assert comprehensive.joins == {"summarize"}
    assert comprehensive.reaches["summarize"] == {"start", "process_high", "process_low"}


@needs_conformance
def test_ignored_tool_fields_warn_and_are_dropped() -> None:
    pb = conformance("save_storage_test/create_tables.yaml")
    (task,) = pb.steps["create_all_tables"].tasks
    assert "pool" not in task.config and "command" in task.config
    assert any("'pool' is ignored" in w for w in pb.warnings)
    scorer = conformance("playbook_composition/user_profile_scorer.yaml")
    assert len(scorer.workbook) == 5
    assert all("assert" not in e.task.config for e in scorer.workbook.values())


# --------------------------------------------------------------------------- rejections

START = "- step: start\n  tool: {kind: noop}\n"

BAD = [
    (
        "unknown arc target, with line",
        doc("""
            - step: start
              tool: {kind: noop}
              next: {arcs: [{step: fetch}]}
            - step: fetch
              tool: {kind: noop}
              next:
                arcs:
                  - step: start
                  - step: fetch_pgae
            """),
        "step 'fetch': next.arcs[1].step: unknown step 'fetch_pgae' (line 13)",
    ),
    (
        "duplicate step name",
        doc(START + START),
        "step 'start': duplicate step name (first defined at line 5) (line 7)",
    ),
    (
        "reserved step name",
        doc(START + "- step: output\n  tool: {kind: noop}\n"),
        "workflow[1].step: step name 'output' is reserved (line 7)",
    ),
    (
        "invalid step name",
        doc(START + "- step: my-step\n  tool: {kind: noop}\n"),
        "workflow[1].step: invalid step name 'my-step'",
    ),
    (
        "bad apiVersion",
        doc(START).replace("noetl.io/v2", "noetl.io/v1"),
        "apiVersion: expected 'noetl.io/v2', got 'noetl.io/v1' (line 1)",
    ),
    ("root vars", doc(START, head="vars: {a: 1}\n"), "`vars:` is not supported: use `set: {ctx."),
    (
        "step vars",
        doc(START + "  vars: {a: 1}\n"),
        "step 'start': `vars:` is not supported: use `set: {ctx.<name>: ...}` (line 7)",
    ),
    ("case", doc(START + "  case: []\n"), "step 'start': `case:` is not supported: routing"),
    ("sink", doc(START + "  sink: {}\n"), "step 'start': `sink:` is not supported"),
    ("step retry", doc(START + "  retry: {}\n"), "`retry:` is not supported here"),
    ("eval", doc(START + "  eval: []\n"), "`eval:` is not supported"),
    ("unknown root key", doc(START, head="extra: 1\n"), "unknown field 'extra' (line 4)"),
    ("missing workflow", doc(START).split("workflow:")[0], "field 'workflow' is required"),
    (
        "missing metadata.name",
        doc(START).replace("{name: t}", "{path: p}"),
        "metadata: field 'name' is required (line 3)",
    ),
    (
        "unknown step key with hint",
        doc(START + "  code: x\n"),
        "step 'start': unknown field 'code' (did you mean tool.code?) (line 7)",
    ),
    (
        "liveness not above timeout",
        doc(START + "  spec: {timeout: 30s, liveness: 20s}\n"),
        "step 'start': spec.liveness (20s) must be greater than spec.timeout (30s)",
    ),
    (
        "compensation reachable",
        doc("""
            - step: start
              tool: {kind: noop}
              spec: {compensation: undo}
              next: undo
            - step: undo
              tool: {kind: noop}
            """),
        "step 'start': spec.compensation: step 'undo' is reachable through arcs",
    ),
    (
        "compensation unknown",
        doc(START + "  spec: {compensation: nope}\n"),
        "step 'start': spec.compensation: unknown step 'nope'",
    ),
    (
        "compensation of a compensation",
        doc("""
            - step: start
              tool: {kind: noop}
              spec: {compensation: undo}
            - step: undo
              tool: {kind: noop}
              spec: {compensation: undo2}
            - step: undo2
              tool: {kind: noop}
            """),
        "step 'start': spec.compensation: step 'undo' has a compensation itself",
    ),
    (
        "approval quorum above user approvers",
        doc(START + "  spec: {approval: {approvers: ['user:alice'], quorum: 2}}\n"),
        "step 'start': spec.approval.quorum: quorum 2 exceeds the 1 listed approver(s)",
    ),
    (
        "approval without approvers",
        doc(START + "  spec: {approval: {approvers: []}}\n"),
        "spec.approval.approvers: expected a non-empty list",
    ),
    (
        "approval bad approver and risk",
        doc(START + "  spec: {approval: {approvers: [alice], risk: extreme}}\n"),
        "spec.approval.approvers[0]: expected 'user:<id>' or 'role:<name>', got 'alice'",
    ),
    (
        "unknown tool kind",
        doc("- step: start\n  tool: {kind: ftp}\n"),
        "step 'start': tool.kind: unknown tool kind 'ftp'",
    ),
    (
        "missing url",
        doc("- step: start\n  tool: {kind: http, method: GET}\n"),
        "step 'start': tool: field 'url' is required for kind 'http' (line 6)",
    ),
    (
        "missing postgres command",
        doc("- step: start\n  tool: {kind: postgres, auth: pg}\n"),
        "tool: field 'command' or 'query' is required for kind 'postgres'",
    ),
    (
        "missing playbook path",
        doc("- step: start\n  tool: {kind: playbook}\n"),
        "field 'path' is required for kind 'playbook'",
    ),
    (
        "unknown workbook entry",
        doc("- step: start\n  tool: {kind: workbook, name: nope}\n"),
        "step 'start': tool.name: unknown workbook entry 'nope'",
    ),
    (
        "jump without to",
        doc("""
            - step: start
              tool:
                - name: a
                  kind: noop
                  spec:
                    policy:
                      rules:
                        - when: "{{ output.status == 'error' }}"
                          then: {do: jump}
            """),
        "step 'start': tool[0].spec.policy.rules[0].then: 'do: jump' requires 'to'",
    ),
    (
        "jump to an unknown task",
        doc("""
            - step: start
              tool:
                - {name: a, kind: noop}
                - name: b
                  kind: noop
                  spec: {policy: {rules: [{when: true, then: {do: jump, to: c}}]}}
            """),
        "tool[1].spec.policy.rules[0].then.to: unknown task 'c' (tasks: a, b, or 'previous')",
    ),
    (
        "bad policy action",
        doc("""
            - step: start
              tool:
                kind: noop
                spec: {policy: {rules: [{else: {then: {do: explode}}}]}}
            """),
        "tool.spec.policy.rules[0].else.then.do: expected one of continue, retry, jump, break",
    ),
    (
        "bad duration",
        doc(START + "  spec: {timeout: 5 minutes}\n"),
        "step 'start': spec.timeout: invalid duration '5 minutes'",
    ),
    (
        "bad retry backoff",
        doc(START + "  spec: {retry: {max_attempts: 0, backoff: random}}\n"),
        "spec.retry.backoff: expected one of none, fixed, linear, exponential, got 'random'",
    ),
    (
        "task shorthand",
        doc("- step: start\n  tool:\n    - fetch: {kind: http, url: x}\n"),
        "task shorthand '- fetch: {...}' is not supported: use '- name: fetch'",
    ),
    (
        "duplicate task name",
        doc("- step: start\n  tool:\n    - {name: a, kind: noop}\n    - {name: a, kind: noop}\n"),
        "step 'start': tool[1].name: duplicate task name 'a'",
    ),
    (
        "cursor loop",
        doc(START + "  loop: {in: '{{ x }}', cursor: {}}\n"),
        "step 'start': loop: cursor loops are not supported (line 7)",
    ),
    ("loop without in", doc(START + "  loop: {iterator: x}\n"), "loop: field 'in' is required"),
    (
        "bad loop mode and max_in_flight",
        doc(START + "  loop: {in: [1], spec: {mode: fast, max_in_flight: 0}}\n"),
        "loop.spec.mode: expected one of sequential, parallel, got 'fast'",
    ),
    (
        "bad max_in_flight",
        doc(START + "  loop: {in: [1], spec: {max_in_flight: 0}}\n"),
        "loop.spec.max_in_flight: expected an integer >= 1, got 0",
    ),
    (
        "bad iterator",
        doc(START + "  loop: {in: [1], iterator: ctx}\n"),
        "loop.iterator: iterator name 'ctx' is reserved",
    ),
    (
        "bare key in step set",
        doc(START + "  set: {x: 1}\n"),
        "step 'start': set: invalid key 'x': expected 'ctx.<name>'",
    ),
    (
        "python script from a file",
        doc("- step: start\n  tool: {kind: python, script: {source: {type: file, path: a.py}}}\n"),
        "tool.script: only 'script: {source: {type: inline, code: ...}}' is supported",
    ),
    (
        "keychain kind",
        doc(START, head="keychain: [{name: api, kind: vault}]\n"),
        "keychain[0].kind: expected one of credential, static, bearer, secrets, got 'vault'",
    ),
    (
        "keychain credential missing",
        doc(START, head="keychain: [{name: api, kind: credential}]\n"),
        "keychain[0]: field 'credential' is required for kind 'credential'",
    ),
    (
        "entry step unknown",
        doc(START, head="executor: {spec: {entry_step: begin}}\n"),
        "executor.spec.entry_step: unknown step 'begin'",
    ),
    (
        "tool-level spec.retry",
        doc("- step: start\n  tool: {kind: noop, spec: {retry: {}}}\n"),
        "tool.spec.retry: tool spec.retry is not supported",
    ),
    (
        "admission rules in the wrong place",
        doc(START + "  spec: {policy: {rules: []}}\n"),
        "spec.policy.rules: task policy rules belong in tool.spec.policy.rules",
    ),
    ("duplicate yaml key", doc(START + "  desc: a\n  desc: b\n"), "duplicate key 'desc' (line 8)"),
    ("yaml syntax", doc(START) + "  - step: [\n", "invalid YAML:"),
    ("not a mapping", "- a\n- b\n", "a playbook must be a mapping, got a list"),
]


@pytest.mark.parametrize(("text", "fragment"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_playbook_is_rejected(text: str, fragment: str) -> None:
    found = problems(text)
    assert any(fragment in p for p in found), found


def test_every_problem_is_reported_at_once() -> None:
    text = doc(
        """
        - step: start
          tool: {kind: http}
          next: [nowhere]
        - step: start
          tool: {kind: noop}
        - step: other
        """,
        head="vars: {}\n",
    )
    found = problems(text)
    assert len(found) == 5, found
    assert found[0].startswith("`vars:` is not supported")
    assert any("duplicate step name" in p for p in found)
    assert any("field 'url' is required" in p for p in found)
    assert any("next[0]: unknown step 'nowhere'" in p for p in found)
    assert "step 'other': field 'tool' is required (line 11)" in found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            doc("- step: start\n  tool: http\n"),
            "step 'start': tool: expected a tool mapping such as {kind: http, ...} "
            "or a list of tasks (line 6)",
        ),
        (
            doc("- step: start\n  tool: {kind: python, script: {source: {type: file}}}\n"),
            "step 'start': tool.script: only 'script: {source: {type: inline, code: ...}}' "
            "is supported (line 6)",
        ),
        (
            doc(START, head="executor: {spec: {timeout: 30, liveness: 10}}\n"),
            "executor.spec.liveness (10s) must be greater than executor.spec.timeout (30s) "
            "(line 4)",
        ),
        (
            doc(START + "  next: {mode: inclusive}\n"),
            "step 'start': next: unknown field 'mode' (expected one of: arcs, spec) (line 7)",
        ),
    ],
)
def test_one_mistake_gives_one_problem(text: str, expected: str) -> None:
    assert problems(text) == [expected]


def test_load_data_without_lines_has_no_line_suffix() -> None:
    with pytest.raises(PlaybookInvalid) as info:
        load.load_data(yaml.safe_load(doc("- step: start\n  tool: {kind: ftp}\n")))
    assert info.value.problems == [
        "step 'start': tool.kind: unknown tool kind 'ftp' "
        "(known: python, http, postgres, duckdb, shell, noop, workbook, playbook, nats)"
    ]


def test_load_data_uses_given_lines() -> None:
    data = yaml.safe_load(doc("- step: start\n  tool: {kind: ftp}\n"))
    with pytest.raises(PlaybookInvalid) as info:
        load.load_data(data, "x", lines={("workflow", 0, "tool", "kind"): 77})
    assert info.value.problems[0].endswith("(line 77)")


# --------------------------------------------------------------------------- normalization


def test_arc_to_missing_end_ends_the_branch() -> None:
    pb = load.load_text(doc("- step: start\n  tool: {kind: noop}\n  next: [end]\n"))
    assert pb.steps["start"].next.arcs == ()


def test_next_forms() -> None:
    pb = load.load_text(
        doc("""
            - step: start
              tool: {kind: noop}
              next: [a, b]
            - step: a
              tool: {kind: noop}
              next: b
            - step: b
              tool: {kind: noop}
            """)
    )
    assert pb.steps["start"].next == model.Next(
        mode="inclusive", arcs=(model.Arc(step="a"), model.Arc(step="b"))
    )
    assert pb.steps["a"].next == model.Next(arcs=(model.Arc(step="b"),))
    assert pb.joins == {"b"}
    assert pb.reaches == {"b": frozenset({"start", "a"})}
    assert pb.warnings == ()


def test_unnamed_pipeline_tasks_get_index_names() -> None:
    pb = load.load_text(
        doc("""
            - step: start
              tool:
                - {kind: noop}
                - {name: task_0, kind: noop}
                - {kind: shell, command: ls}
            """)
    )
    assert [t.name for t in pb.steps["start"].tasks] == ["task_0_", "task_0", "task_2"]


def test_policy_then_defaults() -> None:
    pb = load.load_text(
        doc("""
            - step: start
              tool:
                - name: a
                  kind: noop
                  spec:
                    timeout: 2m
                    policy:
                      on_unmatched: fail
                      rules:
                        - {when: "{{ x }}", then: {do: retry}}
                        - {when: "{{ y }}", then: {do: retry, delay: 2}}
                        - {when: "{{ z }}", then: {do: jump, to: previous}}
            """)
    )
    (task,) = pb.steps["start"].tasks
    assert task.timeout == 120.0
    assert task.policy is not None
    assert task.policy.on_unmatched == "fail"
    plain, delayed, jump = (r.then for r in task.policy.rules)
    assert (plain.attempts, plain.backoff) == (3, "none")
    assert (delayed.backoff, delayed.delay) == ("fixed", 2.0)
    assert jump.to == "previous"


def test_step_spec_extensions_and_executor_defaults() -> None:
    pb = load.load_text(
        doc(
            """
            - step: start
              tool: {kind: noop}
              next: pay
            - step: pay
              tool: {kind: noop}
              spec:
                timeout: 10s
                compensation: refund
                policy:
                  admit:
                    rules:
                      - {when: "{{ not workload.dry_run }}", then: {allow: true}}
                      - else: {then: {allow: false}}
                approval:
                  required: "{{ workload.amount > 1000 }}"
                  approvers: [role:finance, user:alice]
                  quorum: 2
                  expires_in: 24h
                  policy: {check: "{{ workload.amount <= 5000 }}", reason: too much}
                  risk: high
            - step: refund
              tool: {kind: noop}
            """,
            head="""
            executor:
              spec:
                timeout: 1m
                liveness: 5m
                retry: {max_attempts: 4, delay: 2, retry_on: [timeout]}
                cancel_grace: 5s
            """,
        )
    )
    assert pb.executor.cancel_grace == 5.0
    start, pay = pb.steps["start"].spec, pb.steps["pay"].spec
    retry = model.RetrySpec(max_attempts=4, backoff="fixed", delay=2.0, retry_on=("timeout",))
    assert start == model.StepSpec(timeout=60.0, liveness=300.0, retry=retry)
    assert (pay.timeout, pay.liveness, pay.retry) == (10.0, 300.0, retry)
    assert pay.compensation == "refund"
    assert pay.admit == (
        model.AdmitRule(when="{{ not workload.dry_run }}", allow=True),
        model.AdmitRule(when=None, allow=False),
    )
    assert pay.approval == model.ApprovalSpec(
        required="{{ workload.amount > 1000 }}",
        approvers=("role:finance", "user:alice"),
        quorum=2,
        expires_in=86400.0,
        policy_check="{{ workload.amount <= 5000 }}",
        policy_reason="too much",
        risk="high",
    )
    assert pb.warnings == ()  # refund is a compensation: not "unreachable"


def test_inherited_timeout_still_checked_against_liveness() -> None:
    text = doc(START + "  spec: {liveness: 20}\n", head="executor: {spec: {timeout: 30s}}\n")
    assert problems(text) == [
        "step 'start': spec.liveness (20s) must be greater than spec.timeout "
        "(30s from executor.spec) (line 8)"
    ]


def test_keychain_entries() -> None:
    pb = load.load_text(
        doc(
            START,
            head="""
            keychain:
              - {name: api, kind: credential, credential: my_api}
              - {name: hdr, kind: static, map: {x: "{{ workload.x }}"}}
              - {name: tok, kind: bearer, token: "{{ workload.t }}"}
            """,
        )
    )
    assert [k.kind for k in pb.keychain] == ["credential", "static", "bearer"]
    assert pb.keychain[0].credential == "my_api"
    assert pb.keychain[1].map == {"x": "{{ workload.x }}"}


def test_entry_step_falls_back_to_first_step_with_warning() -> None:
    pb = load.load_text(doc("- step: first\n  tool: {kind: noop}\n"))
    assert pb.entry_step == "first"
    assert pb.path == "t"
    assert any("'first' is the entry step" in w for w in pb.warnings)


def test_step_output_is_ignored_with_warning() -> None:
    pb = load.load_text(doc(START + "  output: {select: x}\n"))
    assert pb.warnings == ("step 'start': field 'output' is ignored (line 7)",)


# --------------------------------------------------------------------------- legacy rewrites


def rewritten(legacy: str, canonical: str) -> tuple[model.Playbook, model.Playbook]:
    old, new = load.load_text(doc(legacy)), load.load_text(doc(canonical))
    assert old.steps == new.steps
    assert old.warnings and not new.warnings
    return old, new


def test_legacy_type_python() -> None:
    old, _ = rewritten(
        "- step: start\n  type: python\n  code: 'result = 1'\n  libs: {np: numpy}\n",
        "- step: start\n  tool: {kind: python, code: 'result = 1', libs: {np: numpy}}\n",
    )
    assert old.warnings[0].startswith("step 'start': legacy 'type: python'")


def test_legacy_tool_python_string() -> None:
    old, _ = rewritten(
        "- step: start\n  tool: python\n  code: 'result = 1'\n",
        "- step: start\n  tool: {kind: python, code: 'result = 1'}\n",
    )
    assert old.warnings[0].startswith("step 'start': legacy 'tool: python'")


def test_legacy_next_list_of_mappings() -> None:
    targets = "- step: a\n  tool: {kind: noop}\n- step: b\n  tool: {kind: noop}\n"
    old = load.load_text(
        doc(
            START
            + "  next:\n"
            + "    - {step: a, when: '{{ x }}', args: {n: 1}}\n"
            + "    - {step: b, data: {m: 2}}\n"
            + targets
        )
    )
    assert old.steps["start"].next == model.Next(
        mode="exclusive",
        arcs=(
            model.Arc(step="a", when="{{ x }}", args={"n": 1}),
            model.Arc(step="b", args={"m": 2}),
        ),
    )
    assert any("step 'start': next: legacy 'next' list" in w for w in old.warnings)


def test_legacy_step_args_and_http_aliases() -> None:
    rewritten(
        "- step: start\n  args: {a: 1}\n  tool: {kind: http, endpoint: u, data: {b: 2}}\n",
        "- step: start\n  input: {a: 1}\n  tool: {kind: http, url: u, body: {b: 2}}\n",
    )


def test_legacy_tool_args_and_inline_script() -> None:
    rewritten(
        "- step: start\n  tool: {kind: python, args: {a: 1}, "
        "script: {source: {type: inline, code: 'result = a'}}}\n",
        "- step: start\n  tool: {kind: python, input: {a: 1}, code: 'result = a'}\n",
    )


def test_legacy_loop_mode_at_top_level() -> None:
    rewritten(
        START + "  loop: {in: '{{ xs }}', mode: parallel}\n",
        START + "  loop: {in: '{{ xs }}', spec: {mode: parallel}}\n",
    )


def test_legacy_else_without_then() -> None:
    rewritten(
        "- step: start\n  tool: {kind: noop, spec: {policy: {rules: [{else: {do: fail}}]}}}\n",
        "- step: start\n  tool: {kind: noop, spec: {policy: {rules: [{else: {then: {do: fail}}}]}}}\n",
    )


# --------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        (12, 12.0),
        (1.5, 1.5),
        ("45", 45.0),
        ("500ms", 0.5),
        ("1h30m", 5400.0),
        ("0", 0.0),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    assert load.parse_duration(value, "spec.timeout") == seconds


@pytest.mark.parametrize("value", ["5 minutes", "", "-1s", -3, True, None, "1w", [1]])
def test_parse_duration_rejects(value: object) -> None:
    with pytest.raises(ValueError, match=r"^spec\.timeout: invalid duration"):
        load.parse_duration(value, "spec.timeout")


@pytest.mark.parametrize(
    "value", ["1e3", "inf", "nan", "-5s", "5s-", "1.5.2s", "m", float("inf"), float("nan"), -0.5]
)
def test_parse_duration_is_strict_where_a_float_parser_is_not(value: object) -> None:
    # the one parser of durations: what `float()` would read (or a unit after a sign) is
    # still not a duration a playbook means
    with pytest.raises(ValueError, match=r"^invalid duration"):
        load.parse_duration(value)


# --------------------------------------------------------------------------- limits


def _alias_bomb(levels: int) -> str:
    """`levels` anchors, each a list of nine aliases of the one before: 9**levels leaves."""
    rows = ["  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    rows += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return doc("- step: start\n  tool: {kind: noop}\n", "workload:\n" + "\n".join(rows) + "\n")


def test_alias_bomb_is_refused_before_it_expands() -> None:
    # 9**6 = 531,441 leaves from a 500-byte document; before the limit the load walked
    # every one of them (and the 463-byte one of the issue ran out of memory)
    found = problems(_alias_bomb(6), Limits.of())
    assert len(found) == 1
    assert "YAML aliases expand to more than 100000 nodes" in found[0]
    assert "MILEPOST_MAX_YAML_ALIASES" in found[0]
    assert re.search(r"\(line \d+;", found[0])


def test_aliases_within_the_limit_still_load() -> None:
    text = doc(
        "- step: start\n  tool: {kind: noop, spec: *spec}\n",
        "workload:\n  base: &spec {timeout: 5s}\n  again: *spec\n",
    )
    playbook = load.load_text(text)
    assert playbook.workload["again"] == {"timeout": "5s"}


def test_alias_limit_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MILEPOST_MAX_YAML_ALIASES", "50")
    assert "more than 50 nodes" in problems(_alias_bomb(3), Limits.of())[0]  # 9**3 leaves
    monkeypatch.setenv("MILEPOST_MAX_YAML_ALIASES", "1000")
    assert load.load_text(_alias_bomb(3), limits=Limits.of()).workload["l2"][0][0] == ["lol"] * 9


def test_without_limits_a_document_over_this_processs_settings_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a catalog entry accepted by a server with larger limits, read by a worker with
    # smaller ones: it was checked at register, and loads
    monkeypatch.setenv("MILEPOST_MAX_YAML_ALIASES", "50")
    monkeypatch.setenv("MILEPOST_MAX_PLAYBOOK_BYTES", "100")
    assert load.load_text(_alias_bomb(3)).workload["l2"][0][0] == ["lol"] * 9
    assert "over the limit of 100" in problems(_alias_bomb(3), Limits.of())[0]


def test_recursive_alias_is_refused() -> None:
    text = doc("- step: start\n  tool: {kind: noop}\n", "workload: &w {self: *w}\n")
    assert problems(text) == problems(text, Limits.of())  # with limits or without
    found = problems(text)
    assert found == ["a YAML alias refers to a node that contains it (line 4)"]


def test_document_over_the_size_limit_is_refused_unparsed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MILEPOST_MAX_PLAYBOOK_BYTES", "1000")
    text = doc("- step: start\n  tool: {kind: noop}\n", f"workload: {{pad: {'x' * 1000}}}\n")
    expected = (
        f"the document is {len(text)} bytes, over the limit of 1000 (MILEPOST_MAX_PLAYBOOK_BYTES)"
    )
    assert problems(text, Limits.of()) == [expected]
    file = tmp_path / "big.yaml"
    file.write_text(text)
    with pytest.raises(PlaybookInvalid) as info:
        load.load_file(file)
    assert info.value.problems == [expected]


def test_nesting_beyond_the_limit_is_refused() -> None:
    # 900 levels: the line walk recursed until RecursionError, a crash and not a problem
    deep = "[" * 900 + "]" * 900
    text = doc("- step: start\n  tool: {kind: noop}\n", f"workload: {{deep: {deep}}}\n")
    found = problems(text, Limits.of())
    assert len(found) == 1
    assert found[0].startswith("the document nests deeper than 64 levels (line 4;")
