"""YAML text -> (data, `path -> line` map): safe loading that remembers where things are.

PyYAML's safe loader drops positions once it builds Python objects, so the node tree
is walked first and the line of every mapping key and sequence item is kept under its
path (`('workflow', 2, 'tool')`). Duplicate keys, which the loader silently collapses,
are reported here because only the node tree still shows both.

A document from outside is checked against `Limits` before anything expands it. An alias
is one node however many times it is referenced, so a few hundred bytes of nested aliases
("billion laughs") compose into a small graph whose expansion never fits in memory, and
one alias of a large anchor costs the anchor's whole size each time it is referenced (a
1 MB file aliasing a 1 MiB string a thousand times is a gigabyte of workload). So the
document's expanded size in bytes is counted as it is composed (`_Counting`: an alias
costs its anchor's expansion, known once the anchor is composed) and the text is refused
at the alias that crosses `max_expanded_bytes`, before the rest is even read; the
expanded node count and the nesting are checked on the composed graph, once per distinct
node.
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


_PARSER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML was built with it: the same events, marks included, about
ten times faster (a 200-step playbook: 0.12 s in pure Python)."""


@dataclass(frozen=True)
class Limits:
    """What a document from outside may cost (settings `MILEPOST_MAX_*`)."""

    max_bytes: int
    max_aliases: int
    max_depth: int
    max_expanded_bytes: int = sys.maxsize

    @classmethod
    def of(cls, settings: Settings | None = None) -> Limits:
        settings = settings or Settings()
        return cls(
            settings.max_playbook_bytes,
            settings.max_yaml_aliases,
            settings.max_json_depth,
            settings.max_expanded_bytes,
        )


_UNLIMITED = Limits(sys.maxsize, sys.maxsize, sys.maxsize, sys.maxsize)


class Refused(ValueError):
    """A document over one of its `Limits`; the message names the limit, its setting and
    the line where the document crossed it."""


def text_bytes(text: str) -> int:
    """`text`'s size in UTF-8 (an unpaired surrogate, which no file holds, as 3 bytes)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def expanded_size(value: Any) -> int:
    """The expanded size of a parsed value as `_Counting` counts a document: one byte a
    node plus the text of each scalar (a string's UTF-8, another scalar's `str`), every
    reference to a shared value counted again. Iterative: a value too deep for recursion
    is still measured (what refuses it is the depth check)."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        total += 1
        if isinstance(item, dict):
            for key, kid in item.items():
                stack += (key, kid)
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, str):
            total += text_bytes(item)
        elif item is not None:
            total += len(str(item))
    return total


def over_expanded(value: Any, limit: int, what: str) -> str | None:
    """The problem of `what` (a workload) when `value` expands past `limit` bytes
    (`expanded_size`); None within it."""
    size = expanded_size(value)
    if size <= limit:
        return None
    return (
        f"{what} expands to {size} bytes, over the limit of {limit} (MILEPOST_MAX_EXPANDED_BYTES)"
    )


class _Counting(yaml.composer.Composer):
    """PyYAML's composer (over libyaml's events when there are), counting the document's
    expanded size as it goes: one byte a node plus each scalar's text in UTF-8, an alias
    its anchor's whole expansion. Composition is in document order, so an anchor is
    complete (and its size known) before any alias outside it; an alias to an anchor still
    being composed is recursive, refused here whatever the limits. It recurses a few
    frames a level, so the nesting is bounded here too (the graph's, aliases followed,
    is `_over_limits`')."""

    peek_event: Any  # the parser's, after this class in the loader's MRO

    def __init__(self, text: str, limits: Limits) -> None:
        _PARSER.__init__(self, text)
        yaml.composer.Composer.__init__(self)
        self.limits = limits
        self.expanded = 0
        self.depth = 0
        self.sizes: dict[int, int] = {}  # id(anchored node) -> its expansion, once composed

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            anchored = self.anchors.get(event.anchor)
            if anchored is not None:  # else the composer says the alias is undefined
                size = self.sizes.get(id(anchored))
                if size is None:
                    raise Refused(f"a YAML alias refers to a node that contains it (line {line})")
                self._count(size, line, f" at the alias *{event.anchor}")
            return yaml.composer.Composer.compose_node(self, parent, index)
        before = self.expanded
        nested = not isinstance(event, yaml.ScalarEvent)
        self._count(1 + (0 if nested else text_bytes(event.value)), line, "")
        self.depth += nested
        if self.depth > self.limits.max_depth:
            raise Refused(_too_deep(self.limits, line))
        node = yaml.composer.Composer.compose_node(self, parent, index)
        self.depth -= nested
        if event.anchor is not None:
            self.sizes[id(node)] = self.expanded - before
        return node

    def _count(self, size: int, line: int, where: str) -> None:
        self.expanded += size
        if self.expanded > self.limits.max_expanded_bytes:
            raise Refused(
                f"the document expands to more than {self.limits.max_expanded_bytes} bytes"
                f"{where} (line {line}; MILEPOST_MAX_EXPANDED_BYTES)"
            )


def _too_deep(limits: Limits, line: int) -> str:
    return (
        f"the document nests deeper than {limits.max_depth} levels (line {line}; "
        "MILEPOST_MAX_JSON_DEPTH)"
    )


_Loader: Any = type("_Loader", (_Counting, _PARSER), {})
"""The counting composer first, then the parser, constructor and resolver of `_PARSER`."""


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
    loader = _Loader(text, limits)
    try:
        node = _checked_node(loader, limits)
        lines: dict[problems.LinePath, int] = {}
        found: list[str] = []
        if node is not None:
            _Walk(lines, found).node(node, ())
        data = loader.construct_document(node) if node is not None else None
    except Refused as exc:
        return None, {}, [str(exc)]
    except yaml.YAMLError as exc:
        return None, {}, [_invalid(exc)]
    finally:
        loader.dispose()
    if node is None:
        return None, {}, ["the document is empty"]
    return data, lines, found


def load(text: str, limits: Limits) -> Any:
    """The data of one YAML document, as `yaml.safe_load` reads it, within `limits`; None
    for an empty one. For a value (a `--set`, a file script's document): no line map.

    Raises:
        Refused: over a limit, before anything expanded.
        yaml.YAMLError: not one YAML document.
    """
    refused = too_big(text_bytes(text), limits)
    if refused is not None:
        raise Refused(refused)
    loader = _Loader(text, limits)
    try:
        node = _checked_node(loader, limits)
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def _checked_node(loader: Any, limits: Limits) -> yaml.Node | None:
    """The document's node graph, composed within the expanded size and checked for the
    other limits. Raises Refused."""
    node: yaml.Node | None = loader.get_single_node()
    refused = _over_limits(node, limits) if node is not None else None
    if refused is not None:
        raise Refused(refused)
    return node


def _invalid(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f" (line {mark.line + 1})" if mark is not None else ""
    reason = getattr(exc, "problem", None) or str(exc)
    return f"invalid YAML: {reason}{where}"


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _over_limits(root: yaml.Node, limits: Limits) -> str | None:
    """The first limit the node graph breaks (nesting, alias expansion in nodes).

    Iterative and once per distinct node (the graph has no cycle: `_Counting` refused
    it): `size` is a node's expanded subtree (what the walks below and any JSON dump of
    the data would visit), `height` its nesting. A node is refused as soon as its
    expansion exceeds every node seen so far by more than the limit: its subtree alone
    then adds more than `max_aliases` nodes through aliases.
    """
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        line = node.start_mark.line + 1
        if done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            nested = not isinstance(node, yaml.ScalarNode)
            height[key] = int(nested) + max((height[id(k)] for k in kids), default=0)
            if height[key] > limits.max_depth:
                return _too_deep(limits, line)
            if size[key] - len(size) > limits.max_aliases:
                return (
                    f"YAML aliases expand to more than {limits.max_aliases} nodes (line "
                    f"{line}; MILEPOST_MAX_YAML_ALIASES)"
                )
            continue
        if key in size:
            continue
        stack.append((node, True))
        stack.extend((kid, False) for kid in _children(node) if id(kid) not in size)
    return None


class _Walk:
    """One pass over the node tree, filling `lines` and reporting duplicate keys."""

    def __init__(self, lines: dict[problems.LinePath, int], found: list[str]) -> None:
        self.lines = lines
        self.found = found
        self.keys = _KeyConstructor()

    def node(self, node: yaml.Node, path: problems.LinePath) -> None:
        # no recursive alias gets here: `_Counting` refused it while composing
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.node(item, (*path, i))
        elif isinstance(node, yaml.MappingNode):
            self.mapping(node, path)

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
