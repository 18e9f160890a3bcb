"""The `execution_usage` projection (DSL 10.6): per execution and (provider, model), the
tokens and cost its commands' reports carried (payload key `usage`, `core.usage`).

The API and the metrics read it without folding; per playbook is a sum over it. Like the
other projections its changes are a pure function of events (`ops`), applied in the
append's transaction: additively, since every report adds what its attempt spent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from milepost.core import events as ev
from milepost.core.usage import Totals

Op = tuple[int, str, str, int, int, float]
"""execution_id, provider, model, input_tokens, output_tokens, cost: add to the row."""


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Usage summed over one execution (`execution_usage`) or one playbook
    (`playbook_usage`: `execution_id` None) for one (provider, model)."""

    path: str
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cost: float
    execution_id: int | None = None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class UsageReads(Protocol):
    """The store's usage reads (`port.Store` has them)."""

    def execution_usage(self, execution_id: int) -> list[UsageRow]:
        """One row per (provider, model) the execution's reports named, in that order."""
        ...

    def playbook_usage(self, path: str | None = None) -> list[UsageRow]:
        """Summed over the executions of each playbook path (only `path`'s when given),
        per (path, provider, model), in that order."""
        ...


def ops(event: ev.Event) -> list[Op]:
    """The usage a stored report adds (the caller leaves out stale reports)."""
    if event.event_type not in ev.SETTLING_REPORTS or not event.payload.get("usage"):
        return []
    totals = Totals()
    totals.add(event.payload.get("usage"))
    return [
        (event.execution_id, e.provider, e.model, e.input_tokens, e.output_tokens, e.cost)
        for e in totals.entries()
    ]


Key = tuple[int, str, str]
"""execution_id, provider, model."""


def apply(changes: Iterable[Op], rows: dict[Key, list[float]]) -> None:
    """Add `changes` to rows held in memory ([input_tokens, output_tokens, cost])."""
    for xid, provider, model, tokens_in, tokens_out, cost in changes:
        row = rows.setdefault((xid, provider, model), [0, 0, 0.0])
        row[0] += tokens_in
        row[1] += tokens_out
        row[2] = round(row[2] + cost, 9)


def by_playbook(rows: Iterable[UsageRow], path: str | None = None) -> list[UsageRow]:
    """Execution rows (or playbook rows of several shards) summed per (path, provider,
    model)."""
    sums: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        if path is not None and r.path != path:
            continue
        acc = sums.setdefault((r.path, r.provider, r.model), [0, 0, 0.0])
        acc[0] += r.input_tokens
        acc[1] += r.output_tokens
        acc[2] = round(acc[2] + r.cost, 9)
    return [
        UsageRow(p, prov, m, int(a[0]), int(a[1]), float(a[2]))
        for (p, prov, m), a in sorted(sums.items())
    ]


def decode(rows: Sequence[Sequence[object]], execution_id: int | None = None) -> list[UsageRow]:
    """SQL rows `path, provider, model, input_tokens, output_tokens, cost`."""
    return [
        UsageRow(str(p), str(prov), str(m), int(str(i)), int(str(o)), float(str(c)), execution_id)
        for p, prov, m, i, o, c in rows
    ]
