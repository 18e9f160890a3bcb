"""Compensation in the embedded mode (DSL 10.5): python steps with a side effect (a line in
a file per effect), run by the in-process workers, a crash in the middle, a cancel."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine import summaries
from milepost.engine.embedded import EmbeddedEngine
from milepost.store.sqlite import SQLiteStore
from tests.compensation_saga import (
    REFUND,
    RELEASE,
    cancelled_from_the_cli,
    cancelled_while_shipping,
    crashed,
    effects,
    resumed,
    run,
    saga,
)
from tests.shared import wait_for_async


def test_a_failed_run_compensates_in_reverse_order_exactly_once(store: Any, tmp_path: Path) -> None:
    state = run(store, tmp_path, {"fail": ["ship"], "gate": []})
    assert state.status == st.FAILED
    assert state.error is not None and state.error["step"] == "ship"
    assert "ship refused" in state.error["message"]
    # the loop counts once, with its loop result; refund's `next: ship` is not followed
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", RELEASE, REFUND]
    summary = summaries.execution_summary(state)
    assert summary["compensating"] is False
    assert [(i["compensation"], i["status"]) for i in summary["compensation"]["items"]] == [
        ("release", "COMPLETED"),
        ("refund", "COMPLETED"),
    ]
    assert store.load(state.execution_id)[-1].event_type == ev.EXECUTION_FAILED


def test_a_failing_compensation_is_recorded_and_the_others_still_run(
    store: Any, tmp_path: Path
) -> None:
    state = run(store, tmp_path, {"fail": ["ship", "release"], "gate": []})
    assert state.status == st.FAILED
    assert state.error is not None and state.error["step"] == "ship"  # the original error
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", REFUND]
    items = summaries.execution_summary(state)["compensation"]["items"]
    assert [(i["compensation"], i["status"]) for i in items] == [
        ("release", "FAILED"),
        ("refund", "COMPLETED"),
    ]
    assert "release refused" in items[0]["error"]["message"]


def test_a_completed_run_never_compensates(store: Any, tmp_path: Path) -> None:
    state = run(store, tmp_path, {"fail": [], "gate": []})
    assert state.status == st.COMPLETED
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", "ship"]
    assert not any(e.event_type.startswith("compensation.") for e in store.load(state.execution_id))


def test_a_cancelled_run_compensates_after_its_running_attempt_was_stopped(
    store: Any, tmp_path: Path
) -> None:
    state = cancelled_while_shipping(store, tmp_path)
    assert state.status == st.CANCELLED
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", RELEASE, REFUND]
    assert store.load(state.execution_id)[-1].event_type == ev.EXECUTION_CANCELLED


def test_a_cancel_asked_while_compensating_does_not_stop_it(store: Any, tmp_path: Path) -> None:
    pb, text = saga(tmp_path)

    async def go() -> tuple[st.ExecutionState, bool]:
        async with EmbeddedEngine(store) as engine:
            xid = engine.start(pb, text, {"fail": ["ship"], "gate": ["release"]})
            await wait_for_async(lambda: (tmp_path / "release.started").exists())
            flagged = summaries.execution_summary(engine.state(xid))["compensating"]
            engine.cancel(xid)
            (tmp_path / "release.gate").touch()
            return await engine.wait(xid, timeout=60), flagged

    state, flagged = asyncio.run(go())
    assert flagged is True
    assert state.status == st.FAILED  # the status it was ending with stays
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", RELEASE, REFUND]


def test_milepost_cancel_appended_while_compensating_stops_nothing(tmp_path: Path) -> None:
    """`milepost cancel` appends its request behind the driver: unmarked, it set the
    store's claim flag, so the second compensation was never claimed and the run hung."""
    store = SQLiteStore(tmp_path / "engine.db")
    try:
        state = cancelled_from_the_cli(store, tmp_path, {"fail": ["ship"], "gate": ["release"]})
    finally:
        store.close()
    assert state.status == st.FAILED
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", RELEASE, REFUND]


def test_a_crash_while_compensating_resumes_without_running_any_twice(
    store: Any, tmp_path: Path
) -> None:
    # release done, refund waiting at its gate when the driver goes away
    xid = crashed(store, tmp_path, {"fail": ["ship"], "gate": ["refund"]})
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", RELEASE]
    state = resumed(store, tmp_path, xid, "refund")
    assert state.status == st.FAILED
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", RELEASE, REFUND]
    log = store.load(xid)
    issued = [
        json.dumps(e.payload["compensation"])
        for e in log
        if e.event_type == ev.COMMAND_ISSUED and "compensation" in e.payload
    ]
    assert issued == ["0", "1"]  # the refund in flight was handed out again, not issued again
