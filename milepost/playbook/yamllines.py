"""YAML text -> (data, `path -> line` map): safe loading that remembers where things are.

PyYAML's safe loader drops positions once it builds Python objects, so the node tree
is walked first and the line of every mapping key and sequence item is kept under its
path (`('workflow', 2, 'tool')`). Duplicate keys, which the loader silently collapses,
are reported here because only the node tree still shows both.
"""

from __future__ import annotations

from typing import Any

import yaml

from milepost.playbook import problems

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _KeyConstructor(yaml.constructor.SafeConstructor):
    """Builds mapping keys on their own, to name paths while walking the node tree."""


_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML was built with it: the same nodes, marks included, about
ten times faster (a 200-step playbook: 0.12 s in pure Python)."""


def parse(text: str) -> tuple[Any, dict[problems.LinePath, int], list[str]]:
    """Return (data, lines, problems); data is None after a syntax error."""
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        lines: dict[problems.LinePath, int] = {}
        found: list[str] = []
        if node is not None:
            _Walk(lines, found).node(node, ())
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc)
        return None, {}, [f"invalid YAML: {reason}{where}"]
    finally:
        loader.dispose()
    if node is None:
        return None, {}, ["the document is empty"]
    return data, lines, found


class _Walk:
    """One pass over the node tree, filling `lines` and reporting duplicate keys."""

    def __init__(self, lines: dict[problems.LinePath, int], found: list[str]) -> None:
        self.lines = lines
        self.found = found
        self.keys = _KeyConstructor()
        self.active: set[int] = set()  # nodes on the current path: stops at recursive aliases

    def node(self, node: yaml.Node, path: problems.LinePath) -> None:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if id(node) in self.active:  # a recursive alias
            return
        self.active.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.node(item, (*path, i))
        elif isinstance(node, yaml.MappingNode):
            self.mapping(node, path)
        self.active.discard(id(node))

    def mapping(self, node: yaml.MappingNode, path: problems.LinePath) -> None:
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.keys.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                where = f"{problems.fmt_path(path)}: " if path else ""
                self.found.append(f"{where}duplicate key {key!r} (line {line})")
            seen.add(key)
            self.lines.setdefault((*path, key), line)
            self.node(value_node, (*path, key))
