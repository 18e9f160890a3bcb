"""The `attempt_log` table (migration 9): what attempts printed, per reported attempt and
stream, outside the event log (logs are not state: no fold reads them).

The engine writes the entries a report carried once it has taken the report
(`engine.attempt_logs`); a repeated report (same event id) adds nothing. `log_id` orders
an execution's entries and is the cursor a follower resumes from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

LOG_PAGE = 500
"""Entries one read returns at most."""


@dataclass(frozen=True, slots=True)
class LogRow:
    """One stream of one reported attempt."""

    execution_id: int
    step: str
    command_id: int
    attempt: int
    event_id: int
    """The report it came with."""
    stream: str
    text: str
    cut: int
    """Bytes cut from the middle of `text` (its cap)."""
    created_at: float
    log_id: int = 0
    """Assigned when stored; 0 until then."""


class AttemptLogs(Protocol):
    """The store's attempt logs (`port.Store` has them)."""

    def add_attempt_logs(self, rows: Sequence[LogRow]) -> int:
        """Store `rows` in one transaction, leaving out those whose (event_id, stream) is
        stored already; returns how many were added."""
        ...

    def attempt_logs(
        self, execution_id: int, *, step: str | None = None, after: int = 0, limit: int = LOG_PAGE
    ) -> list[LogRow]:
        """The execution's entries (only `step`'s when given) with `log_id` past `after`,
        in `log_id` order, at most `limit`."""
        ...
