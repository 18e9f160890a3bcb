"""The `attempt_log` table on every adapter: entries come back in the order they were
added, past a cursor, per step; a repeated (event, stream) adds nothing; each execution's
are its own (on its shard)."""

from __future__ import annotations

from typing import Any

from milepost.store.attempt_logs import LogRow


def row(xid: int, event_id: int, stream: str, text: str, step: str = "s") -> LogRow:
    return LogRow(xid, step, event_id + 1, 1, event_id, stream, text, 0, 5.0)


def test_logs_come_back_in_order_past_a_cursor_and_per_step(store: Any) -> None:
    assert (
        store.add_attempt_logs(
            [
                row(7, 100, "stdout", "hello\n"),
                row(7, 100, "traceback", "Traceback ..."),
                row(8, 200, "stdout", "other run"),
            ]
        )
        == 3
    )
    assert store.add_attempt_logs([row(7, 300, "stderr", "é\u2603 unicode", step="t")]) == 1
    logs = store.attempt_logs(7)
    assert [(r.event_id, r.stream, r.text, r.step) for r in logs] == [
        (100, "stdout", "hello\n", "s"),
        (100, "traceback", "Traceback ...", "s"),
        (300, "stderr", "é\u2603 unicode", "t"),
    ]
    assert logs[0] == LogRow(7, "s", 101, 1, 100, "stdout", "hello\n", 0, 5.0, logs[0].log_id)
    assert logs[0].log_id < logs[1].log_id < logs[2].log_id
    assert store.attempt_logs(7, after=logs[0].log_id) == logs[1:]
    assert store.attempt_logs(7, step="t") == logs[2:]
    assert store.attempt_logs(7, limit=1) == logs[:1]
    assert [r.text for r in store.attempt_logs(8)] == ["other run"]
    assert store.attempt_logs(9) == []


def test_a_repeated_report_adds_no_entry(store: Any) -> None:
    store.add_attempt_logs([row(7, 100, "stdout", "once")])
    assert (
        store.add_attempt_logs([row(7, 100, "stdout", "again"), row(7, 100, "stderr", "new")]) == 1
    )
    assert [(r.stream, r.text) for r in store.attempt_logs(7)] == [
        ("stdout", "once"),
        ("stderr", "new"),
    ]
