"""DSL 12.2: a template Jinja cannot parse is a validation error naming the field and its
line, wherever DSL 9.1 renders (input, tool fields, python code, set, arc when, workbook
tools); `desc` is never rendered, so never checked."""

from __future__ import annotations

import pytest

from milepost.errors import PlaybookInvalid
from milepost.playbook.load import load_text

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/t}\n"


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            "workflow:\n  - step: start\n    input: {a: '{{ x | }}'}\n    tool: {kind: noop}\n",
            "step 'start': input.a: template syntax error: ",
        ),
        (
            "workflow:\n  - step: start\n    tool: {kind: http, url: 'http://h/{{ a b }}'}\n",
            "step 'start': tool.url: template syntax error: ",
        ),
        (
            "workflow:\n  - step: start\n    tool: {kind: python, code: 'result = {{ 1 + }}'}\n",
            "step 'start': tool.code: template syntax error: ",
        ),
        (
            "workflow:\n  - step: start\n    tool: {kind: noop}\n    set: {ctx.a: '{% if %}'}\n",
            "step 'start': set.ctx.a: template syntax error: ",
        ),
        (
            "workflow:\n  - step: start\n    tool: {kind: noop}\n    next:\n      arcs:\n"
            "        - {step: end, when: '{{ start.ok == }}'}\n  - step: end\n    tool: {kind: noop}\n",
            "step 'start': next.arcs[0].when: template syntax error: ",
        ),
        (
            "workbook:\n  - name: w\n    tool: {kind: http, url: '{{ u ) }}'}\n"
            "workflow:\n  - step: start\n    tool: {kind: workbook, name: w}\n",
            "tool.url: template syntax error: ",
        ),
    ],
)
def test_a_template_that_does_not_parse_is_named(body: str, said: str) -> None:
    with pytest.raises(PlaybookInvalid) as refused:
        load_text(HEAD + body)
    assert said in str(refused.value)
    assert "(line " in str(refused.value)


def test_desc_and_good_templates_are_not_checked() -> None:
    body = (
        "workflow:\n  - step: start\n    desc: '{{ not a template'\n"
        "    tool: {kind: python, input: {a: '{{ workload.a | default(1) }}'},"
        " code: 'result = a'}\n"
    )
    assert load_text(HEAD + body).steps["start"]
