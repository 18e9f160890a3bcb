"""The `execution_usage` projection on every adapter: each report's usage adds to its
execution's row per (provider, model), a stale report and a repeated event add nothing, and
per playbook is the sum over its executions (DSL 10.6)."""

from __future__ import annotations

import itertools
from typing import Any

from milepost.core import events as ev
from milepost.store.usage import UsageRow

_ids = itertools.count(90_000)


def started(xid: int, path: str) -> ev.Event:
    return ev.new_event(
        next(_ids), xid, ev.EXECUTION_STARTED, 1.0, payload={"path": path, "version": 1}
    )


def reported(
    xid: int, *entries: dict[str, Any], stale: bool = False, failed: bool = False
) -> ev.Event:
    eid = next(_ids)
    payload: dict[str, Any] = {
        "command_id": eid + 1_000_000,
        "run": 1,
        "index": -1,
        "attempt": 1,
        "usage": list(entries),
    }
    return ev.new_event(
        eid,
        xid,
        ev.COMMAND_FAILED if failed else ev.COMMAND_COMPLETED,
        2.0,
        step="draft",
        payload=payload,
        meta={"stale": True} if stale else {},
    )


def gpt(tokens_in: int, tokens_out: int, cost: float) -> dict[str, Any]:
    return {
        "provider": "openai",
        "model": "gpt-x",
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "cost": cost,
    }


CLAUDE = {
    "provider": "anthropic",
    "model": "claude",
    "input_tokens": 1,
    "output_tokens": 2,
    "cost": 0.5,
}


def test_usage_adds_up_per_execution_and_per_playbook(store: Any) -> None:
    first = reported(11, gpt(800, 100, 1.25))
    store.append(
        [
            started(11, "agents/writer"),
            started(12, "agents/writer"),
            started(13, "agents/other"),
            first,
        ]
    )
    # two reports of one batch on one row, a failed attempt's too; a stale one and a
    # repeat of a stored event count for nothing
    store.append(
        [
            reported(11, gpt(12, 4, 0.25), CLAUDE),
            reported(11, gpt(1, 1, 0.5), failed=True),
            reported(11, gpt(10**6, 0, 99.0), stale=True),
            first,
        ]
    )
    store.append([reported(12, gpt(5, 5, 2.0)), reported(13, CLAUDE)])
    assert store.execution_usage(11) == [
        UsageRow("agents/writer", "anthropic", "claude", 1, 2, 0.5, 11),
        UsageRow("agents/writer", "openai", "gpt-x", 813, 105, 2.0, 11),
    ]
    assert store.execution_usage(99) == []
    assert store.playbook_usage() == [
        UsageRow("agents/other", "anthropic", "claude", 1, 2, 0.5),
        UsageRow("agents/writer", "anthropic", "claude", 1, 2, 0.5),
        UsageRow("agents/writer", "openai", "gpt-x", 818, 110, 4.0),
    ]
    assert store.playbook_usage("agents/other") == [
        UsageRow("agents/other", "anthropic", "claude", 1, 2, 0.5)
    ]
