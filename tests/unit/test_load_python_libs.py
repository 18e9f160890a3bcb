"""python `libs` at load (DSL 3.1, 12): the mapping, `{from, import}` and list forms are
accepted; anything else is an error naming the entry."""

from __future__ import annotations

import pytest

from milepost.errors import PlaybookInvalid
from milepost.playbook.load import load_text

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: l, path: tests/l}\nworkflow:\n"


def _libs(libs: str) -> str:
    return HEAD + f"  - step: start\n    tool: {{kind: python, code: 'result = 1', libs: {libs}}}\n"


@pytest.mark.parametrize(
    "libs",
    [
        "{m: math, p: os.path}",
        "{dt: {from: datetime, import: datetime}}",
        "[json, re, os.path]",
    ],
)
def test_each_form_loads(libs: str) -> None:
    assert load_text(_libs(libs)).steps["start"].tasks[0].config["libs"]


@pytest.mark.parametrize(
    ("libs", "said"),
    [
        ("{dt: {from: datetime}}", "libs.dt: expected {from: module, import: name}"),
        ("{dt: {from: datetime, import: 'a.b'}}", "libs.dt: expected {from: module, import: name}"),
        ("{2x: math}", "is not a python name"),
        ("{m: 'not a module'}", "libs.m: expected 'alias: module.name'"),
        ("[json, 3]", "libs[1]: expected a module name"),
        ("json", "expected a mapping of aliases to modules or a list of modules, got a string"),
    ],
)
def test_a_malformed_entry_is_named(libs: str, said: str) -> None:
    with pytest.raises(PlaybookInvalid) as refused:
        load_text(_libs(libs))
    assert said in str(refused.value)
