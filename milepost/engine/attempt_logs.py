"""What attempts printed, kept beside their reports (`core.logs`, `store.attempt_logs`).

A report brings its attempt's captured streams (`AttemptResult.logs`; on the wire the
report event's `logs`); `keep` stores them, keyed by the report's event id, before the
report's events are appended: by the time a run is seen to have ended, every stream its
reports carried is readable (`milepost logs --follow` reads the status first, then the
logs). A repeated report adds nothing. Never in an event: logs are not state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from milepost.core import events as ev
from milepost.core.logs import Captured
from milepost.engine.fence import REPORT_TYPES
from milepost.store import port

Printed = Mapping[int, Sequence[Captured]]
"""A report's event id -> the streams its attempt captured."""


def keep(store: port.Store, events: Sequence[ev.Event], printed: Printed) -> None:
    """Store the streams of the reports among `events` (called holding their locks)."""
    rows = [
        port.LogRow(
            e.execution_id,
            e.step or "",
            int(e.payload["command_id"]),
            int(e.payload.get("attempt") or 1),
            e.event_id,
            c.stream,
            c.text,
            c.cut,
            e.created_at,
        )
        for e in events
        if e.event_type in REPORT_TYPES
        for c in printed.get(e.event_id, ())
    ]
    if rows:
        store.add_attempt_logs(rows)
