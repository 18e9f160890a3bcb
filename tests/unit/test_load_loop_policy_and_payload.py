"""DSL 6 and 12: `loop.spec.policy: {exec: distributed|local}` is accepted and checked; a
playbook tool's `payload` is its `input`."""

from __future__ import annotations

import pytest

from milepost.errors import PlaybookInvalid
from milepost.playbook.load import load_text

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: l, path: tests/l}\nworkflow:\n"


def _loop(policy: str) -> str:
    return HEAD + (
        f"  - step: start\n    loop: {{in: [1, 2], iterator: i, spec: {{mode: parallel,"
        f" policy: {policy}}}}}\n    tool: {{kind: noop}}\n"
    )


@pytest.mark.parametrize("policy", ["{exec: distributed}", "{exec: local}", "{}"])
def test_a_loop_placement_policy_loads(policy: str) -> None:
    assert load_text(_loop(policy)).steps["start"].loop is not None


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        ("{exec: gpu}", "loop.spec.policy.exec: expected one of distributed, local, got 'gpu'"),
        ("{exec: local, where: x}", "unknown field 'where'"),
        ("local", "loop.spec.policy: expected a mapping"),
    ],
)
def test_a_bad_placement_is_named(policy: str, said: str) -> None:
    with pytest.raises(PlaybookInvalid) as refused:
        load_text(_loop(policy))
    assert said in str(refused.value)


def _child(tool: str) -> str:
    return HEAD + f"  - step: start\n    tool: {{kind: playbook, path: tests/child, {tool}}}\n"


def test_a_playbook_tool_s_payload_is_its_input() -> None:
    task = load_text(_child("payload: {n: 3}")).steps["start"].tasks[0]
    assert task.input == {"n": 3}
    assert "payload" not in task.config


def test_payload_and_input_together_are_refused() -> None:
    with pytest.raises(PlaybookInvalid, match="'payload' is an alias of 'input'"):
        load_text(_child("payload: {n: 3}, input: {n: 4}"))
