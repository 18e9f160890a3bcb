"""What a conformance run reports: one `EntryResult` per entry, the `SuiteResult` of them
all with its closing line, and the line printed for an entry as it finishes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass
class EntryResult:
    playbook: str
    outcome: str
    """`passed`, `failed` or `skipped`."""
    reasons: list[str] = field(default_factory=list)
    seconds: float = 0.0
    execution_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SuiteResult:
    entries: list[EntryResult] = field(default_factory=list)

    def _count(self, outcome: str) -> int:
        return sum(1 for e in self.entries if e.outcome == outcome)

    @property
    def passed(self) -> int:
        return self._count(PASSED)

    @property
    def failed(self) -> int:
        return self._count(FAILED)

    @property
    def skipped(self) -> int:
        return self._count(SKIPPED)

    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": [e.to_dict() for e in self.entries],
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
        }

    def closing_line(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"


class SuiteError(Exception):
    """The suite itself cannot run (missing directory, unreadable expectations, bad `only`)."""


def format_line(r: EntryResult) -> str:
    """`PASS  path  (0.3s)`, `FAIL  path: reason; reason  (1.2s)` or `SKIP  path: reason`."""
    reasons = "; ".join(one_line(x) for x in r.reasons)
    if r.outcome == PASSED:
        return f"PASS  {r.playbook}  ({r.seconds:.1f}s)"
    if r.outcome == SKIPPED:
        return f"SKIP  {r.playbook}: {reasons}"
    return f"FAIL  {r.playbook}: {reasons}  ({r.seconds:.1f}s)"


def one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())
