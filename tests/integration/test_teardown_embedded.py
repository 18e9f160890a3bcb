"""Teardown in the embedded mode (`executor.spec.teardown`): the saga's python steps, with
`cleanup` and `notify` tearing down, run by the in-process workers; each end of a run, a
cancel while tearing down (the engine's and `milepost cancel`'s), a crash in the middle."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from milepost.core import decide as dc
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.engine import summaries
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from tests.compensation_saga import (
    DONE,
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


def test_a_completed_run_tears_down_in_order_then_completes(store: Any, tmp_path: Path) -> None:
    state = run(store, tmp_path, {"fail": [], "gate": []}, teardown=True)
    assert state.status == st.COMPLETED
    assert effects(tmp_path) == [*DONE, "ship", "cleanup COMPLETED None", "notify COMPLETED"]
    last = store.load(state.execution_id)[-1]
    assert last.event_type == ev.EXECUTION_COMPLETED
    assert [(t["step"], t["status"]) for t in last.payload["teardown"]] == [
        ("cleanup", "COMPLETED"),
        ("notify", "COMPLETED"),
    ]


def test_a_failed_run_compensates_then_tears_down_then_fails(store: Any, tmp_path: Path) -> None:
    state = run(store, tmp_path, {"fail": ["ship"], "gate": []}, teardown=True)
    assert state.status == st.FAILED
    assert state.error is not None and state.error["step"] == "ship"
    assert effects(tmp_path) == [*DONE, RELEASE, REFUND, "cleanup FAILED ship", "notify FAILED"]


def test_a_failing_teardown_step_is_shown_and_the_run_still_completes(
    store: Any, tmp_path: Path
) -> None:
    state = run(store, tmp_path, {"fail": ["cleanup"], "gate": []}, teardown=True)
    assert state.status == st.COMPLETED and state.error is None
    assert effects(tmp_path) == [*DONE, "ship", "notify COMPLETED"]  # notify still ran
    summary = summaries.execution_summary(state)
    assert summary["steps"]["cleanup"]["status"] == st.FAILED
    assert [(i["step"], i["status"]) for i in summary["teardown"]["items"]] == [
        ("cleanup", "FAILED"),
        ("notify", "COMPLETED"),
    ]
    assert "cleanup refused" in summary["teardown"]["items"][0]["error"]["message"]


def test_a_cancelled_run_compensates_and_tears_down_then_ends_cancelled(
    store: Any, tmp_path: Path
) -> None:
    state = cancelled_while_shipping(store, tmp_path, teardown=True)
    assert state.status == st.CANCELLED
    assert effects(tmp_path) == [
        *DONE,
        RELEASE,
        REFUND,
        "cleanup CANCELLED None",
        "notify CANCELLED",
    ]
    assert store.load(state.execution_id)[-1].event_type == ev.EXECUTION_CANCELLED


def test_a_cancel_asked_while_tearing_down_stops_nothing(store: Any, tmp_path: Path) -> None:
    pb, text = saga(tmp_path, teardown=True)

    async def go() -> tuple[st.ExecutionState, dict[str, Any]]:
        async with EmbeddedEngine(store) as engine:
            xid = engine.start(pb, text, {"fail": [], "gate": ["cleanup"]})
            await wait_for_async(lambda: (tmp_path / "cleanup.started").exists())
            during = summaries.execution_summary(engine.state(xid))
            engine.cancel(xid)
            (tmp_path / "cleanup.gate").touch()
            return await engine.wait(xid, timeout=60), during

    state, during = asyncio.run(go())
    assert during["status"] == st.RUNNING and during["tearing_down"] is True
    assert state.status == st.COMPLETED  # the status it was ending with stays
    assert effects(tmp_path) == [*DONE, "ship", "cleanup COMPLETED None", "notify COMPLETED"]


def test_milepost_cancel_appended_while_tearing_down_stops_nothing(
    tmp_path: Path,
) -> None:
    """`milepost cancel` appends its request straight to the log, behind the driver: it
    is marked as the engine marks its own, or the store would refuse the claim of the
    next teardown step and the run would never end."""
    store = SQLiteStore(tmp_path / "engine.db")
    try:
        workload = {"fail": [], "gate": ["cleanup"]}
        state = cancelled_from_the_cli(store, tmp_path, workload, teardown=True)
        [request] = [
            e
            for e in store.load(state.execution_id)
            if e.event_type == ev.EXECUTION_CANCEL_REQUESTED
        ]
    finally:
        store.close()
    assert request.meta.get("tearing_down") is True
    assert state.status == st.COMPLETED
    assert effects(tmp_path)[-2:] == ["cleanup COMPLETED None", "notify COMPLETED"]


def test_a_crash_while_tearing_down_resumes_without_running_any_step_twice(
    store: Any, tmp_path: Path
) -> None:
    workload = {"fail": ["ship"], "gate": ["notify"]}  # cleanup done, notify at its gate
    xid = crashed(store, tmp_path, workload, teardown=True)
    assert effects(tmp_path) == [*DONE, RELEASE, REFUND, "cleanup FAILED ship"]
    state = resumed(store, tmp_path, xid, "notify")
    assert state.status == st.FAILED
    assert effects(tmp_path) == [*DONE, RELEASE, REFUND, "cleanup FAILED ship", "notify FAILED"]
    issued = [
        e.payload["teardown"]
        for e in store.load(xid)
        if e.event_type == ev.COMMAND_ISSUED and "teardown" in e.payload
    ]
    assert issued == [0, 1]  # the notify in flight was handed out again, not issued again


TORN_DOWN = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: torn, path: tests/torn}
executor: {spec: {teardown: cleanup}}
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
    next: after
  - step: after
    tool: {kind: python, code: "result = 2"}
  - step: cleanup
    tool:
      kind: python
      input: {t: "{{ teardown }}"}
      code: |
        open("OUT", "a").write(t["status"] + " " + t["error"]["kind"] + "\\n")
"""


def _broken_after_start(monkeypatch: Any, *, in_teardown: bool) -> None:
    """`decide` raises once `start` is done: a bug in the workflow's decisions (with
    `in_teardown`, in the teardown's too)."""
    real = dc.decide

    def decide(state: st.ExecutionState, *args: Any) -> dc.Decision:
        tearing_down = state.teardown is not None
        if in_teardown and tearing_down or "start" in state.results and not tearing_down:
            raise KeyError("missing")
        return real(state, *args)

    monkeypatch.setattr(dc, "decide", decide)


def _run_torn_down(store: Any, tmp_path: Path) -> st.ExecutionState:
    text = TORN_DOWN.replace("OUT", str(tmp_path / "out"))

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            return await engine.run(load.load_text(text), text, {}, timeout=60)

    return asyncio.run(go())


def test_a_run_an_engine_error_fails_still_tears_down(
    store: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    _broken_after_start(monkeypatch, in_teardown=False)
    state = _run_torn_down(store, tmp_path)
    assert state.status == st.FAILED
    assert state.error is not None and state.error["kind"] == "engine"
    assert (tmp_path / "out").read_text() == "FAILED engine\n"
    log = store.load(state.execution_id)
    assert [e.event_type for e in log if e.event_type not in ev.CLAIM_EVENTS][-6:] == [
        ev.COMMAND_COMPLETED,  # start's report, kept
        ev.TEARDOWN_STARTED,
        ev.COMMAND_ISSUED,
        ev.COMMAND_COMPLETED,
        ev.TEARDOWN_COMPLETED,
        ev.EXECUTION_FAILED,
    ]
    assert state == fl.fold(None, log)  # the cached state is the fold of what was stored


def test_an_engine_error_that_breaks_teardown_too_ends_the_run_failed(
    store: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    _broken_after_start(monkeypatch, in_teardown=True)
    state = _run_torn_down(store, tmp_path)
    assert state.status == st.FAILED and state.error is not None
    assert state.error["kind"] == "engine"
    assert not (tmp_path / "out").exists()
    last = store.load(state.execution_id)[-1]
    assert last.event_type == ev.EXECUTION_FAILED
    assert [(t["step"], t["status"], t["error"]["kind"]) for t in last.payload["teardown"]] == [
        ("cleanup", "FAILED", "engine")
    ]
    assert store.open_commands(state.execution_id) == []
