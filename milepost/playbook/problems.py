"""Problems and warnings found while loading a playbook, and how their messages read.

A message reads `<scope>: <field path>: <text> (line N)`. The scope is `step 'x'`,
`workbook 'x'` or absent at the root; the line comes from the `path -> line` map the
YAML reader built, looked up from the field upwards, so a rewritten or missing field
still points at the closest line that exists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

LinePath = tuple[str | int, ...]
"""Where a value sits in the document: `('workflow', 2, 'tool')`."""

Show = Literal["field", "parent", "none"]
"""Which path a message prints: the field's, its parent's (for "unknown field 'x'",
where the key is already in the text) or none."""


def fmt_path(path: Iterable[str | int]) -> str:
    """`('tool', 0, 'spec')` -> `tool[0].spec`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def type_name(value: Any) -> str:
    """How a YAML value is named in messages: `a mapping`, `a list`, `null`..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


@dataclass
class Report:
    """Every problem and warning of one document, in the order they were found."""

    lines: dict[tuple[Any, ...], int]
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def line(self, path: LinePath) -> int | None:
        for end in range(len(path), 0, -1):
            found = self.lines.get(path[:end])
            if found is not None:
                return found
        return None

    def add(self, target: list[str], where: Where, msg: str, show: Show) -> None:
        parts = [where.label] if where.label else []
        shown = {"field": where.rel, "parent": where.rel[:-1], "none": ()}[show]
        if shown:
            parts.append(fmt_path(shown))
        parts.append(msg)
        text = ": ".join(parts)
        line = self.line(where.base + where.rel)
        if line is not None:
            text += f" (line {line})"
        target.append(text)


@dataclass(frozen=True)
class Where:
    """A place in the document: a scope (`step 'x'`) plus a field path inside it."""

    report: Report
    label: str | None
    base: LinePath
    rel: LinePath = ()

    def __truediv__(self, key: str | int) -> Where:
        return replace(self, rel=(*self.rel, key))

    def error(self, msg: str, *, show: Show = "field") -> None:
        """Record a problem; `show` picks the path printed: this field, its parent or none
        (the line is always this field's)."""
        self.report.add(self.report.problems, self, msg, show)

    def warn(self, msg: str, *, show: Show = "field") -> None:
        self.report.add(self.report.warnings, self, msg, show)

    def alias_line(self, other: Where) -> None:
        """Let this (rewritten) place report the line of `other`."""
        line = self.report.line(other.base + other.rel)
        if line is not None:
            self.report.lines.setdefault(self.base + self.rel, line)

    def scope(self, label: str) -> Where:
        """This place as the root of a new scope: `step 'x'` or `workbook 'x'`."""
        return Where(self.report, label, (*self.base, *self.rel))


@dataclass(frozen=True)
class Parts:
    """One message taken apart again (`parts`): for a reader that marks it on its line,
    such as the web UI's playbook view."""

    message: str
    """The whole message, as `milepost validate` prints it."""
    step: str | None
    """The step it is in (`step 'x'`), None at the root or in the workbook."""
    scope: str | None
    """`step 'x'`, `workbook 'x'` or None."""
    field: str | None
    """The field path inside the scope (`tool.code`), None when the message names none."""
    line: int | None


_SCOPE = re.compile(r"^(step|workbook) '((?:[^']|'(?!: ))*)': ")
_FIELD = re.compile(r"^([A-Za-z0-9_$-]+(?:\.[A-Za-z0-9_$-]+|\[\d+\])*): ")
_LINE = re.compile(r" \(line (\d+)(?:; [A-Z_]+)?\)$")  # a limit names its setting after it


def parts(message: str) -> Parts:
    """The scope, field and line of a message `Report.add` wrote (`<scope>: <field>:
    <text> (line N)`, each part optional)."""
    rest, step, scope, field, line = message, None, None, None, None
    found = _SCOPE.match(rest)
    if found:
        scope = found.group(0)[:-2]
        step = found.group(2) if found.group(1) == "step" else None
        rest = rest[found.end() :]
    found = _FIELD.match(rest)
    if found:
        field = found.group(1)
    at = _LINE.search(message)
    if at:
        line = int(at.group(1))
    return Parts(message, step, scope, field, line)
