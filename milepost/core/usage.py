"""Usage a tool reports (tokens, cost, by provider and model; DSL 10.6), and its sums.

A tool's usage is `{input_tokens, output_tokens, cost, provider, model}` (OpenAI's
`prompt_tokens` / `completion_tokens` are read as the first two). The attempt runner
turns each report into entries (`parse`) and sums an attempt's (`add`); the worker puts
them on the command's report as payload key `usage`, a list with one entry per
(provider, model), never inside `result`. The fold sums them per execution (`Totals`).
Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from milepost.errors import MilepostError

Key = tuple[str, str]
"""(provider, model); "" when the tool did not say."""

_TOKEN_KEYS = {
    "input_tokens": "input_tokens",
    "prompt_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "completion_tokens": "output_tokens",
}


class UsageInvalid(MilepostError):
    """A tool reported usage the engine cannot count (a budget would be blind to it)."""

    code = "usage_invalid"


@dataclass(slots=True)
class Entry:
    provider: str = ""
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0

    @property
    def key(self) -> Key:
        return (self.provider, self.model)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": self.cost,
        }


def parse(raw: Any, where: str) -> list[dict[str, Any]]:
    """One usage report as payload entries; `UsageInvalid` names what is wrong and where.
    Keys it does not count (`total_tokens`, details) are ignored: providers add them."""
    if not isinstance(raw, Mapping):
        raise UsageInvalid(
            f"{where}: usage must be a mapping, got {type(raw).__name__}", where=where
        )
    entry = Entry()
    for key, value in raw.items():
        if key in ("provider", "model"):
            if value is not None and not isinstance(value, str):
                raise UsageInvalid(
                    f"{where}: usage.{key} must be a string, got {value!r}", where=where, field=key
                )
            setattr(entry, key, value or "")
        elif key in _TOKEN_KEYS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UsageInvalid(
                    f"{where}: usage.{key} must be a non-negative integer, got {value!r}",
                    where=where,
                    field=key,
                )
            name = _TOKEN_KEYS[key]
            setattr(entry, name, getattr(entry, name) + value)
        elif key == "cost":
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise UsageInvalid(
                    f"{where}: usage.cost must be a non-negative number, got {value!r}",
                    where=where,
                    field=key,
                )
            entry.cost = float(value)
    return [entry.to_dict()]


def add(*reports: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """Payload entries summed per (provider, model), in a stable order."""
    if not any(reports):  # every attempt of a step without tokens or cost: nothing to sum
        return []
    totals = Totals()
    for report in reports:
        totals.add(report)
    return [e.to_dict() for e in totals.entries()]


@dataclass(slots=True)
class Totals:
    """The usage of one execution: entries per (provider, model), and their sums."""

    by: dict[Key, Entry] = field(default_factory=dict)

    def add(self, report: Iterable[Mapping[str, Any]] | None) -> None:
        """Fold a payload's `usage` in. It was checked by the runner that wrote it; a
        report from elsewhere that is not a list of mappings counts for nothing."""
        if not isinstance(report, list):
            return
        for item in report:
            if not isinstance(item, Mapping):
                continue
            key = (str(item.get("provider") or ""), str(item.get("model") or ""))
            entry = self.by.setdefault(key, Entry(*key))
            entry.input_tokens += _int(item.get("input_tokens"))
            entry.output_tokens += _int(item.get("output_tokens"))
            entry.cost = round(entry.cost + _float(item.get("cost")), 9)

    def entries(self) -> list[Entry]:
        return [self.by[k] for k in sorted(self.by)]

    @property
    def tokens(self) -> int:
        return sum(e.tokens for e in self.by.values())

    @property
    def cost(self) -> float:
        return round(sum(e.cost for e in self.by.values()), 9)

    def summary(self) -> dict[str, Any] | None:
        """`{tokens, input_tokens, output_tokens, cost, by: [...]}`, None when nothing was
        reported (a run without usage shows none)."""
        if not self.by:
            return None
        return summary(self.entries())


def summary(entries: Iterable[Entry]) -> dict[str, Any]:
    rows = list(entries)
    return {
        "tokens": sum(e.tokens for e in rows),
        "input_tokens": sum(e.input_tokens for e in rows),
        "output_tokens": sum(e.output_tokens for e in rows),
        "cost": round(sum(e.cost for e in rows), 9),
        "by": [{**e.to_dict(), "tokens": e.tokens} for e in rows],
    }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _float(value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok and value > 0 else 0.0
