"""The loader's checks of the nats tool (DSL 12.1): the operation and the fields it needs,
named with the step and field, at load time."""

from __future__ import annotations

import pytest

from milepost.errors import PlaybookInvalid
from milepost.playbook import load
from tests.unit.test_load import doc


def _problems(tool: str) -> list[str]:
    with pytest.raises(PlaybookInvalid) as info:
        load.load_text(doc(f"- step: cache\n  tool: {tool}\n"), source="inline.yaml")
    return [str(p) for p in info.value.problems]


def test_a_nats_tool_needs_an_operation() -> None:
    assert _problems("{kind: nats, bucket: b}") == [
        "step 'cache': tool: field 'operation' is required for kind 'nats' (line 6)"
    ]


def test_an_unknown_operation_is_named_with_the_known_ones() -> None:
    (problem,) = _problems("{kind: nats, operation: kv_set, bucket: b}")
    assert problem.startswith("step 'cache': tool.operation: unknown nats operation 'kv_set'")
    assert "kv_put" in problem and "js_stream_info" in problem


@pytest.mark.parametrize(
    ("tool", "field", "operation"),
    [
        ("{kind: nats, operation: kv_put, bucket: b, key: k}", "value", "kv_put"),
        ("{kind: nats, operation: kv_get, key: k}", "bucket", "kv_get"),
        ("{kind: nats, operation: object_put, bucket: b, data: x}", "name", "object_put"),
        ("{kind: nats, operation: js_publish, data: x}", "subject", "js_publish"),
        ("{kind: nats, operation: js_get_msg, stream: S}", "seq", "js_get_msg"),
        ("{kind: nats, operation: kv_get, bucket: '', key: k}", "bucket", "kv_get"),
    ],
)
def test_each_operation_names_the_field_it_lacks(tool: str, field: str, operation: str) -> None:
    assert _problems(tool) == [
        f"step 'cache': tool: field {field!r} is required for nats operation {operation!r} (line 6)"
    ]


def test_valid_nats_tools_load_with_their_fields() -> None:
    text = doc(
        "- step: cache\n"
        "  tool: {kind: nats, operation: kv_put, bucket: b, key: k, value: null, ttl: 5m}\n"
        "- step: get\n"
        "  tool: {kind: nats, operation: object_get, bucket: b, name: report.json}\n"
        "- step: later\n"
        "  tool: {kind: nats, operation: '{{ op }}'}\n"  # checked when it renders
        "- step: piped\n"
        "  tool:\n"
        "    - {name: put, kind: nats, operation: object_put, bucket: b, object: o, data: 1}\n"
    )
    playbook = load.load_text(text, source="inline.yaml")
    assert playbook.steps["cache"].tasks[0].config["value"] is None
    assert playbook.steps["get"].tasks[0].config["name"] == "report.json"
    # in a pipeline `name` names the task: the object is `object`
    piped = playbook.steps["piped"].tasks[0]
    assert piped.name == "put" and piped.config["name"] == "o"
