"""DSL 12.2: a tool's own `timeout` is a duration like every other: a malformed literal is a
load error naming the field; one that renders wrong fails the call instead of silently
waiting the default (the playbook tool waited 300 s for `timeout: 30x`)."""

from __future__ import annotations

import pytest

from milepost.errors import PlaybookInvalid
from milepost.playbook.load import load_text
from milepost.tools import base
from milepost.tools import playbook as playbook_tool
from milepost.tools.http import _timeout as http_timeout

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/t}\nworkflow:\n"


@pytest.mark.parametrize(
    "tool",
    [
        "{kind: http, url: 'http://h/', timeout: 30x}",
        "{kind: playbook, path: tests/child, timeout: soon}",
        "{kind: http, url: 'http://h/', timeout: -5}",
    ],
)
def test_a_malformed_literal_timeout_is_a_load_error(tool: str) -> None:
    with pytest.raises(PlaybookInvalid) as refused:
        load_text(HEAD + f"  - step: start\n    tool: {tool}\n")
    assert "step 'start': tool.timeout: " in str(refused.value)


@pytest.mark.parametrize("timeout", ["30s", "1m", 45, "{{ workload.t }}"])
def test_durations_and_templates_load(timeout: object) -> None:
    text = (
        HEAD
        + f"  - step: start\n    tool: {{kind: http, url: 'http://h/', timeout: {timeout!r}}}\n"
    )
    assert load_text(text).steps["start"]


def test_the_tools_read_durations_and_refuse_what_is_not_one() -> None:
    assert http_timeout("1m", None) == 60.0
    assert http_timeout("2s", 1.5) == 1.5  # the step's own timeout bounds it
    with pytest.raises(ValueError, match="http `timeout`"):
        http_timeout("30x", None)
    call = base.ToolCall("playbook", {"path": "tests/child", "timeout": "5m"}, {}, {}, "k")
    assert playbook_tool._timeout(call) == 300.0
    bad = base.ToolCall("playbook", {"path": "tests/child", "timeout": "later"}, {}, {}, "k")
    with pytest.raises(ValueError, match="playbook `timeout`"):
        playbook_tool._timeout(bad)
