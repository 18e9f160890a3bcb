"""YAML text -> (data, `path -> line` map): safe loading that remembers where things are.

PyYAML's safe loader drops positions once it builds Python objects, so the node tree
is walked first and the line of every mapping key and sequence item is kept under its
path (`('workflow', 2, 'tool')`). Duplicate keys, which the loader silently collapses,
are reported here because only the node tree still shows both.

Before either walk, the text's size and the node graph are checked against `Limits`: an
alias is one node however many times it is referenced, so a few hundred bytes of nested
aliases ("billion laughs") compose into a small graph whose expansion never fits in
memory. Its expanded size is counted on the graph, once per distinct node, and refused
before anything expands it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import yaml

from milepost.playbook import problems
from milepost.settings import Settings

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _KeyConstructor(yaml.constructor.SafeConstructor):
    """Builds mapping keys on their own, to name paths while walking the node tree."""


_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML was built with it: the same nodes, marks included, about
ten times faster (a 200-step playbook: 0.12 s in pure Python)."""


@dataclass(frozen=True)
class Limits:
    """What a playbook document may cost (settings `MILEPOST_MAX_*`)."""

    max_bytes: int
    max_aliases: int
    max_depth: int

    @classmethod
    def of(cls, settings: Settings | None = None) -> Limits:
        settings = settings or Settings()
        return cls(settings.max_playbook_bytes, settings.max_yaml_aliases, settings.max_json_depth)


_UNLIMITED = Limits(sys.maxsize, sys.maxsize, sys.maxsize)


def too_big(size: int, limits: Limits) -> str | None:
    """The problem of a document of `size` bytes, None when it is within the limit."""
    if size <= limits.max_bytes:
        return None
    return (
        f"the document is {size} bytes, over the limit of {limits.max_bytes} "
        "(MILEPOST_MAX_PLAYBOOK_BYTES)"
    )


def parse(
    text: str, limits: Limits | None = None
) -> tuple[Any, dict[problems.LinePath, int], list[str]]:
    """Return (data, lines, problems); data is None after a syntax error or a limit.

    `limits` None: none (a document accepted under limits before, such as a catalog
    entry, loads wherever it is read); a recursive alias is refused either way."""
    limits = limits or _UNLIMITED
    # a str has at most 4 bytes a character: encode only when the count could matter
    size = len(text) if len(text) * 4 <= limits.max_bytes else len(text.encode("utf-8", "replace"))
    refused = too_big(size, limits)
    if refused is not None:
        return None, {}, [refused]
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        lines: dict[problems.LinePath, int] = {}
        found: list[str] = []
        refused = _over_limits(node, limits) if node is not None else None
        if refused is not None:
            return None, {}, [refused]
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


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _over_limits(root: yaml.Node, limits: Limits) -> str | None:
    """The first limit the node graph breaks (a recursive alias, nesting, alias expansion).

    Iterative and once per distinct node: `size` is a node's expanded subtree (what the
    walks below and any JSON dump of the data would visit), `height` its nesting. A node
    is refused as soon as its expansion exceeds every node seen so far by more than the
    limit: its subtree alone then adds more than `max_aliases` nodes through aliases.
    """
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        line = node.start_mark.line + 1
        if done:
            on_path.discard(key)
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            nested = not isinstance(node, yaml.ScalarNode)
            height[key] = int(nested) + max((height[id(k)] for k in kids), default=0)
            if height[key] > limits.max_depth:
                return (
                    f"the document nests deeper than {limits.max_depth} levels "
                    f"(line {line}; MILEPOST_MAX_JSON_DEPTH)"
                )
            if size[key] - len(size) > limits.max_aliases:
                return (
                    f"YAML aliases expand to more than {limits.max_aliases} nodes (line "
                    f"{line}; MILEPOST_MAX_YAML_ALIASES)"
                )
            continue
        if key in size:
            continue
        if key in on_path:
            return f"a YAML alias refers to a node that contains it (line {line})"
        on_path.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in _children(node) if id(kid) not in size)
    return None


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
