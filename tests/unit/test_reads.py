"""What a step's templates read (`playbook.reads`), and the trimmed contexts built from it."""

from __future__ import annotations

from typing import Any

from milepost.core import work
from milepost.playbook import render
from tests.unit.sim import Sim, playbook


def test_names_read_walks_values_and_skips_keys_and_locals() -> None:
    value = {
        "{{ key_is_not_read }}": "{{ s41 }}",
        "b": [
            "x {{ y.z | default(w) }}",
            "{% for i in items %}{{ i }}{{ loop.index }}{% endfor %}",
        ],
        "c": 3,
        "d": "plain text",
    }
    assert render.names_read(value) == {"s41", "y", "w", "items"}
    assert render.names_read("{{ range(3) | list }}") == frozenset()  # a global, not a name
    assert render.names_read("no template") == frozenset()


def test_names_read_is_none_for_a_template_that_does_not_parse() -> None:
    assert render.names_read(["{{ a }}", "{{ b }"]) is None


CHAIN = """
workload: {base: 10, unused: 1}
workflow:
  - step: s0
    tool: {kind: python, input: {prev: "{{ base }}"}, code: "result = prev + 1"}
    next: s1
  - step: s1
    tool: {kind: python, input: {prev: "{{ s0 }}"}, code: "result = prev + 1"}
    next: s2
  - step: s2
    tool: {kind: python, input: {prev: "{{ s1 }}"}, code: "result = context['s0'] + prev"}
"""


def _context(sim: Sim, step: str) -> dict[str, Any]:
    (cmd,) = sim.live(step)
    return work.work_item(sim.state, sim.pb, cmd).context


def test_a_chain_step_carries_what_it_reads_and_the_reserved_names() -> None:
    sim = Sim(playbook(CHAIN))
    assert set(_context(sim, "s0")) == {"base", "workload", "ctx", "iter", "execution_id"}
    sim.complete("s0", 11)
    context = _context(sim, "s1")
    assert set(context) == {"s0", "workload", "ctx", "iter", "execution_id"}
    assert context["s0"] == 11 and context["workload"] == {"base": 10, "unused": 1}


def test_python_code_that_reads_the_context_global_gets_the_whole_context() -> None:
    sim = Sim(playbook(CHAIN))
    sim.complete("s0", 11)
    sim.complete("s1", 12)
    context = _context(sim, "s2")
    assert {"s0", "s1", "base", "unused"} <= set(context)
    assert sim.pb.reads_of("s2").attempt is None


def test_templated_python_code_gets_the_whole_context() -> None:
    pb = playbook("""
    workflow:
      - step: a
        tool: {kind: python, code: "result = {{ workload.n }}"}
    """)
    assert pb.reads_of("a").attempt is None


def test_attempt_reads_count_policies_sets_workbook_entries_and_the_keychain() -> None:
    pb = playbook("""
    keychain:
      - {name: api, kind: bearer, token: "{{ token_source }}"}
    workbook:
      - name: fetch
        tool: {kind: http, url: "{{ base_url }}/x", method: GET}
    workflow:
      - step: a
        tool: {kind: workbook, name: fetch, input: {q: "{{ query }}"}}
        next: b
      - step: b
        tool:
          - name: one
            kind: noop
            spec:
              policy:
                rules:
                  - when: "{{ output.status == 'error' and retry_ok }}"
                    then: {do: retry, set: {ctx.tries: "{{ tries_seed }}"}}
            set: {ctx.last: "{{ one }}"}
    """)
    assert pb.reads_of("a").attempt == {"token_source", "base_url", "query"}
    assert pb.reads_of("b").attempt == {"token_source", "output", "retry_ok", "tries_seed", "one"}


def test_start_and_exit_read_admission_loop_set_and_arcs() -> None:
    pb = playbook("""
    workflow:
      - step: a
        loop: {in: "{{ items }}", iterator: it, spec: {mode: parallel, max_in_flight: "{{ width }}"}}
        tool: {kind: noop}
        set: {ctx.total: "{{ a | length }}"}
        next:
          arcs:
            - {step: b, when: "{{ gate }}", set: {ctx.x: "{{ xs }}"}}
      - step: b
        spec: {policy: {admit: {rules: [{when: "{{ allowed }}", then: {allow: true}}]}}}
        tool: {kind: noop}
    """)
    assert pb.reads_of("a").start == {"items", "width"}
    assert pb.reads_of("a").exit == {"a", "gate", "xs"}
    assert pb.reads_of("b").start == {"allowed"}


def test_a_loop_iteration_still_sees_its_loop_variables_and_arc_args_names() -> None:
    pb = playbook("""
    workload: {xs: [1, 2], far: 5, near: 7}
    workflow:
      - step: a
        loop: {in: "{{ xs }}", iterator: x}
        tool: {kind: noop, input: {v: "{{ x }}"}}
        next: {arcs: [{step: b, args: {w: "{{ near }}"}}]}
      - step: b
        tool: {kind: noop, input: {v: "{{ w }}"}}
    """)
    sim = Sim(pb)
    context = _context(sim, "a")
    assert context["x"] == 1 and context["_index"] == 0 and "far" not in context
    sim.run_all()
    assert sim.state.status == "COMPLETED"
