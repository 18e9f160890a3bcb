"""YAML size amplification (issue 33, item 5): a document's expanded size is counted in
bytes as it is composed, an alias costing its anchor's whole expansion, and a document
past `max_expanded_bytes` is refused at the alias that crosses it, before anything
expands, by every reader of outside YAML (`yamllines.parse`: playbook files, `register`,
`validate`; `yamllines.load`: `--set` values and file scripts' documents)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from milepost.cli import inputs
from milepost.errors import PlaybookInvalid
from milepost.playbook import load, scripts, yamllines
from milepost.playbook.yamllines import Limits

MIB = 1024 * 1024
HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: amp, path: tests/amp}\n"
WORKFLOW = "workflow:\n- step: start\n  tool: {kind: noop}\n"


def amplified(aliases: int, per_list: int = 0) -> str:
    """A 1 MiB string aliased `aliases` times (1,000: a 1 MB file, a GiB once expanded);
    with `per_list`, a list of `per_list` aliases of that list of aliases (about 97 GiB
    from a 1 MB file at 300 x 330)."""
    rows = [f"  s: &s {'x' * MIB}", f"  a: &a [{', '.join(['*s'] * aliases)}]"]
    if per_list:
        rows.append(f"  b: [{', '.join(['*a'] * per_list)}]")
    return HEAD + "workload:\n" + "\n".join(rows) + "\n" + WORKFLOW


def merge_bomb(levels: int) -> str:
    """Merge keys that PyYAML flattens before it builds a mapping: each level merges the
    one before ten times, so the node lists it builds grow tenfold a level although the
    data (the same ten keys) does not. `script` in a comment: `inline_text` reads it."""
    rows = ["  m0: &m0 {" + ", ".join(f"k{i}: {i}" for i in range(10)) + "}"]
    rows += [f"  m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 10)}]}}" for i in range(1, levels)]
    return HEAD + "# no script here\nworkload:\n" + "\n".join(rows) + "\n" + WORKFLOW


def test_a_mebibyte_aliased_a_thousand_times_is_refused_at_the_alias() -> None:
    # before: the node count (1,001) passed; `validate` and `register` took it, and a run
    # built a GiB workload (3 GB in the server in 45 s)
    text = amplified(1000)
    with pytest.raises(PlaybookInvalid) as info:
        load.load_text(text, source="amp.yaml", limits=Limits.of())
    assert info.value.problems == [
        f"the document expands to more than {16 * MIB} bytes at the alias *s (line 6; "
        "MILEPOST_MAX_EXPANDED_BYTES)"
    ]
    assert info.value.message.startswith("amp.yaml: 1 problem(s):")


def test_a_file_that_expands_to_97_gib_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "amp.yaml"
    file.write_text(amplified(300, per_list=330))
    assert file.stat().st_size < 1.1 * MIB
    with pytest.raises(PlaybookInvalid) as info:
        load.load_file(file)
    assert info.value.source == str(file)
    assert "MILEPOST_MAX_EXPANDED_BYTES" in info.value.problems[0]


def test_aliases_under_the_limit_load_and_the_limit_is_a_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = amplified(14)  # 15 MiB of workload, under the default
    assert load.load_text(text, limits=Limits.of()).workload["a"][13] == "x" * MIB
    monkeypatch.setenv("MILEPOST_MAX_EXPANDED_BYTES", str(10 * MIB))
    with pytest.raises(PlaybookInvalid, match=r"more than 10485760 bytes at the alias \*s"):
        load.load_text(text, limits=Limits.of())


def test_a_merge_key_bomb_is_refused_and_never_flattened() -> None:
    # 10**8 pairs at the last level: PyYAML's flattening (`yaml.safe_load`, which the
    # file-script pass used) ran out of memory; refused here before any of it
    text = merge_bomb(9)
    assert "MILEPOST_MAX_EXPANDED_BYTES" in yamllines.parse(text, Limits.of())[2][0]
    with pytest.raises(yamllines.Refused):
        yamllines.load(text, Limits.of())
    assert scripts.inline_text(text, Path("."), limits=Limits.of()) is text  # the loader says


def test_a_recursive_alias_is_refused_at_the_alias() -> None:
    text = "a: &a\n  - x\n  - *a\n"
    assert yamllines.parse(text)[2] == ["a YAML alias refers to a node that contains it (line 3)"]
    with pytest.raises(yamllines.Refused, match=r"contains it \(line 3\)"):
        yamllines.load(text, Limits.of())


def test_a_set_value_that_expands_past_the_limit_is_a_usage_error() -> None:
    bomb = "[&a [" + ", ".join(["lol"] * 10) + "]"  # then b to h, ten of the one before
    bomb += "".join(f", &{chr(n)} [{', '.join([f'*{chr(n - 1)}'] * 10)}]" for n in range(98, 105))
    with pytest.raises(typer.BadParameter, match=r"^big: the document expands to more than"):
        inputs.read_workload(None, [f"big={bomb}]"])


def test_a_workload_over_the_limit_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MILEPOST_MAX_EXPANDED_BYTES", "1000")
    assert inputs.read_workload('{"a": "' + "x" * 900 + '"}', ["b=1"]) == {"a": "x" * 900, "b": 1}
    with pytest.raises(typer.BadParameter, match="the workload expands to 1004 bytes, over the"):
        inputs.read_workload('{"a": "' + "x" * 1000 + '"}', [])
    with pytest.raises(typer.BadParameter, match="MILEPOST_MAX_EXPANDED_BYTES"):
        inputs.read_workload('{"a": "' + "x" * 600 + '"}', ["b=" + "y" * 600])


def test_expanded_size_of_a_value_counts_every_reference() -> None:
    shared = ["ab", 7, None, True]
    # the list 1, "ab" 3, 7 2, None 1, True 5: 12 each time it is referenced
    assert yamllines.expanded_size({"k": shared}) == 1 + 2 + 12
    assert yamllines.expanded_size({"k": shared, "j": shared}) == 1 + 2 * (2 + 12)
    assert yamllines.expanded_size("é") == 3


# -- the class: every document, its expansion against the limit -----------------------------


@dataclass
class _Doc:
    """A flow-style document being drawn, with the anchors finished so far (an alias may
    only name an anchor whose node is complete: no recursion here)."""

    done: list[tuple[str, str]] = field(default_factory=list)  # (anchor, kind)


_WORDS = st.text(alphabet="abcdefxyz", min_size=1, max_size=6)
_QUOTED = st.text(alphabet='ab é日\n\\"', max_size=12).map(
    lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
)


def _node(data: st.DataObject, doc: _Doc, depth: int) -> tuple[str, str]:
    kinds = ["scalar", "quoted", "int"] + (["seq", "map"] if depth < 4 else [])
    if doc.done:
        kinds.append("alias")
    kind = data.draw(st.sampled_from(kinds))
    if kind == "alias":
        name, aliased = data.draw(st.sampled_from(doc.done))
        return f"*{name}", aliased
    if kind == "seq":
        items = [_node(data, doc, depth + 1)[0] for _ in range(data.draw(st.integers(0, 4)))]
        text = "[" + ", ".join(items) + "]"
    elif kind == "map":
        text = "{" + ", ".join(_pairs(data, doc, depth)) + "}"
    else:
        text = data.draw(
            {"scalar": _WORDS, "quoted": _QUOTED, "int": st.integers(0, 10**6).map(str)}[kind]
        )
        kind = "scalar"
    if data.draw(st.booleans()):
        name = f"a{len(doc.done)}"
        doc.done.append((name, kind))
        text = f"&{name} {text}"
    return text, kind


def _pairs(data: st.DataObject, doc: _Doc, depth: int) -> list[str]:
    """A mapping's pairs, a merge key first (of mappings anchored before it) or none."""
    pairs = []
    mappings = [name for name, kind in doc.done if kind == "map"]
    if mappings and data.draw(st.booleans()):
        merged = data.draw(st.lists(st.sampled_from(mappings), min_size=1, max_size=3))
        pairs.append("<<: " + (f"*{merged[0]}" if len(merged) == 1 else f"[*{', *'.join(merged)}]"))
    keys = data.draw(st.lists(_WORDS, max_size=4, unique=True))
    return pairs + [f"{key}: {_node(data, doc, depth + 1)[0]}" for key in keys]


def _expansion(node: yaml.Node, cap: int) -> int:
    """The oracle: the node graph PyYAML composes walked as a tree, every alias expanded,
    one byte a node plus each scalar's UTF-8 text; stops past `cap`."""
    total, stack = 0, [node]
    while stack and total <= cap:
        item = stack.pop()
        total += 1
        if isinstance(item, yaml.ScalarNode):
            total += len(item.value.encode("utf-8"))
        elif isinstance(item, yaml.SequenceNode):
            stack.extend(item.value)
        else:
            stack.extend(part for pair in item.value for part in pair)
    return total


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_document_is_refused_iff_its_expansion_is_over_the_limit(
    data: st.DataObject,
) -> None:
    doc = _Doc()
    roots = [_node(data, doc, 0)[0] for _ in range(data.draw(st.integers(1, 6)))]
    text = "[" + ", ".join(roots) + "]"
    cap = 20_000
    expansion = _expansion(yaml.compose(text, Loader=yaml.SafeLoader), cap)
    limit = data.draw(st.integers(1, min(expansion, cap) * 2 + 10), label="limit")
    limits = Limits(sys.maxsize, sys.maxsize, 64, limit)
    parsed, _lines, found = yamllines.parse(text, limits)
    try:
        value = inputs.parse_sets([f"k={text}"], limits)["k"]
    except typer.BadParameter as exc:
        value = exc
    event("refused" if expansion > limit else "loaded")
    event("with aliases" if "*" in text else "without aliases")
    event("with merge keys" if "<<" in text else "without merge keys")
    if expansion > limit:
        assert parsed is None
        assert len(found) == 1
        assert re.fullmatch(
            rf"the document expands to more than {limit} bytes( at the alias \*a\d+)? "
            r"\(line 1; MILEPOST_MAX_EXPANDED_BYTES\)",
            found[0],
        )
        with pytest.raises(yamllines.Refused):
            yamllines.load(text, limits)
        assert isinstance(value, typer.BadParameter)
    else:
        expected = yaml.safe_load(text)
        assert (parsed, found) == (expected, [])
        assert yamllines.load(text, limits) == expected
        assert value == expected
