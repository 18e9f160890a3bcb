"""Tool fields under `tool.spec` are lifted to the tool with a warning (DSL 12)."""

from __future__ import annotations

import pytest

from milepost.errors import PlaybookInvalid
from milepost.playbook import load

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: s, path: s}\n"


def _load(tool: str) -> load.model.Playbook:
    return load.load_text(HEAD + "workflow:\n- step: start\n  tool:\n" + tool)


def test_spec_fields_are_lifted_with_a_warning_and_policy_stays() -> None:
    playbook = _load(
        "    kind: http\n    spec:\n      method: POST\n      url: http://x/y\n"
        "      params: {a: 1}\n      timeout: 5s\n"
        "      policy: {rules: [{when: '{{ outcome.status == \"error\" }}', then: {do: fail}}]}\n"
    )
    task = playbook.steps["start"].tasks[0]
    assert task.config["method"] == "POST" and task.config["url"] == "http://x/y"
    assert task.config["params"] == {"a": 1}
    assert task.timeout is not None and task.policy is not None
    warned = "\n".join(playbook.warnings)
    for key in ("method", "url", "params"):
        assert f"'spec.{key}' is deprecated: write {key!r} on the tool" in warned
    assert "timeout" not in warned and "policy" not in warned


def test_lifted_fields_go_through_aliases_and_the_unknown_field_check() -> None:
    playbook = _load("    kind: http\n    spec: {endpoint: http://x, methd: POST}\n")
    task = playbook.steps["start"].tasks[0]
    assert task.config["url"] == "http://x"  # the legacy alias applied to a lifted field
    warned = "\n".join(playbook.warnings)
    assert "methd" in warned and "method" in warned  # did-you-mean on the lifted typo


def test_python_spec_input_and_code() -> None:
    playbook = _load("    kind: python\n    spec: {input: {x: 1}, code: 'result = x'}\n")
    task = playbook.steps["start"].tasks[0]
    assert task.input == {"x": 1} and task.config["code"] == "result = x"


def test_a_field_both_on_the_tool_and_in_spec_is_an_error() -> None:
    with pytest.raises(PlaybookInvalid) as info:
        _load("    kind: http\n    url: http://a\n    spec: {url: http://b}\n")
    assert "'url' is given both on the tool and in its spec" in info.value.message


def test_spec_retry_is_still_rejected() -> None:
    with pytest.raises(PlaybookInvalid) as info:
        _load("    kind: http\n    url: http://a\n    spec: {retry: {max_attempts: 2}}\n")
    assert "tool spec.retry is not supported" in info.value.message
