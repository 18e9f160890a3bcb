"""What one section's checks need from another's while a single document loads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from milepost.playbook import graph, model, problems

RawStep = tuple[str, dict[str, Any], problems.Where]
"""A workflow item whose name is valid and unique: (name, fields, its scope)."""


@dataclass
class LoadContext:
    report: problems.Report
    root: problems.Where
    step_names: set[str] = field(default_factory=set)
    """Every step name, collected before any step is checked, so that arcs and
    compensations may name steps defined further down."""
    workbook_names: set[str] = field(default_factory=set)
    """Every workbook entry name, collected before workbook tools are checked."""
    executor: model.ExecutorSpec = field(default_factory=model.ExecutorSpec)
    """`executor.spec`: the defaults of every step's spec."""
    executor_raw: dict[str, Any] = field(default_factory=dict)
    """`executor.spec` as written, to quote inherited values in messages."""
    graph: graph.StepGraph = field(default_factory=graph.StepGraph)

    @classmethod
    def new(cls, lines: dict[tuple[Any, ...], int], found: list[str]) -> LoadContext:
        """A context whose report starts with the YAML reader's `found` problems."""
        report = problems.Report(dict(lines), list(found))
        return cls(report, problems.Where(report, None, ()))
