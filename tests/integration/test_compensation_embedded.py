"""Compensation in the embedded mode (DSL 10.5): python steps with a side effect (a line in
a file per effect), run by the in-process workers, a crash in the middle, a cancel."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine import summaries
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from tests.shared import wait_for_async

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: saga, path: tests/saga}\n"

# each step appends its effect to DIR/effects; a step named in `gate` waits for
# DIR/<step>.gate (and says it started in DIR/<step>.started); those in `fail` raise
SAGA = """
workload: {fail: [ship], gate: []}
workflow:
  - step: start
    tool:
      kind: python
      input: {w: "{{ workload }}"}
      code: |
        PRELUDE
        effect("start", "charge")
        result = {"id": "ch_1"}
    spec: {compensation: refund}
    next: reserve
  - step: reserve
    loop: {in: [a, b], iterator: sku}
    tool:
      kind: python
      input: {w: "{{ workload }}", sku: "{{ sku }}"}
      code: |
        PRELUDE
        effect("reserve", "reserve " + sku)
        result = sku
    spec: {compensation: release}
    next: ship
  - step: ship
    tool:
      kind: python
      input: {w: "{{ workload }}"}
      code: |
        PRELUDE
        effect("ship", "ship")
  - step: refund
    tool:
      kind: python
      input: {w: "{{ workload }}", c: "{{ compensation }}"}
      code: |
        PRELUDE
        effect("refund", "refund " + json.dumps(c, sort_keys=True))
    next: ship
  - step: release
    tool:
      kind: python
      input: {w: "{{ workload }}", c: "{{ compensation }}"}
      code: |
        PRELUDE
        effect("release", "release " + json.dumps(c, sort_keys=True))
"""

PRELUDE = """\
import json, os, time
def effect(name, line):
    if name in w["gate"]:
        open("DIR/" + name + ".started", "a").write("x\\n")
        deadline = time.monotonic() + 60
        while not os.path.exists("DIR/" + name + ".gate") and time.monotonic() < deadline:
            time.sleep(0.01)
    if name in w["fail"]:
        raise RuntimeError(name + " refused")
    open("DIR/effects", "a").write(line + "\\n")
"""


def saga(tmp_path: Path) -> tuple[Any, str]:
    lines = []
    for line in textwrap.dedent(SAGA).splitlines():
        if line.strip() == "PRELUDE":
            pad = line[: len(line) - len(line.lstrip())]
            lines += [pad + code for code in PRELUDE.splitlines()]
        else:
            lines.append(line)
    text = HEADER + "\n".join(lines).replace("DIR", str(tmp_path)) + "\n"
    return load.load_text(text), text


def effects(tmp_path: Path) -> list[str]:
    path = tmp_path / "effects"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = SQLiteStore(tmp_path / "engine.db")
    yield s
    s.close()


def run(store: Any, tmp_path: Path, workload: dict[str, Any]) -> st.ExecutionState:
    pb, text = saga(tmp_path)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            xid = engine.start(pb, text, workload)
            return await engine.wait(xid, timeout=60)

    return asyncio.run(go())


REFUND = 'refund {"result": {"id": "ch_1"}, "run": 1, "step": "start"}'
RELEASE = 'release {"result": ["a", "b"], "run": 1, "step": "reserve"}'


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
        ("release", "COMPLETED"), ("refund", "COMPLETED")]
    assert store.load(state.execution_id)[-1].event_type == ev.EXECUTION_FAILED


def test_a_failing_compensation_is_recorded_and_the_others_still_run(store: Any,
                                                                    tmp_path: Path) -> None:  # fmt: skip
    state = run(store, tmp_path, {"fail": ["ship", "release"], "gate": []})
    assert state.status == st.FAILED
    assert state.error is not None and state.error["step"] == "ship"  # the original error
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", REFUND]
    items = summaries.execution_summary(state)["compensation"]["items"]
    assert [(i["compensation"], i["status"]) for i in items] == [
        ("release", "FAILED"), ("refund", "COMPLETED")]
    assert "release refused" in items[0]["error"]["message"]


def test_a_completed_run_never_compensates(store: Any, tmp_path: Path) -> None:
    state = run(store, tmp_path, {"fail": [], "gate": []})
    assert state.status == st.COMPLETED
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", "ship"]
    assert not any(e.event_type.startswith("compensation.") for e in store.load(state.execution_id))


def test_a_cancelled_run_compensates_after_its_attempt_finished(store: Any,
                                                               tmp_path: Path) -> None:  # fmt: skip
    pb, text = saga(tmp_path)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            xid = engine.start(pb, text, {"fail": [], "gate": ["ship"]})
            await wait_for_async(lambda: (tmp_path / "ship.started").exists())
            engine.cancel(xid)
            (tmp_path / "ship.gate").touch()
            return await engine.wait(xid, timeout=60)

    state = asyncio.run(go())
    assert state.status == st.CANCELLED
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", "ship", RELEASE, REFUND]
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


def test_a_crash_while_compensating_resumes_without_running_any_twice(store: Any,
                                                                     tmp_path: Path) -> None:  # fmt: skip
    pb, text = saga(tmp_path)
    # release done, refund waiting at its gate when the driver goes away
    workload = {"fail": ["ship"], "gate": ["refund"]}

    async def first_life() -> int:
        async with EmbeddedEngine(store) as engine:
            xid = engine.start(pb, text, workload)
            await wait_for_async(lambda: (tmp_path / "refund.started").exists())
            return xid

    xid = asyncio.run(first_life())
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", RELEASE]

    async def second_life() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            engine.resume(xid)
            (tmp_path / "refund.gate").touch()
            return await engine.wait(xid, timeout=60)

    state = asyncio.run(second_life())
    assert state.status == st.FAILED
    assert effects(tmp_path) == ["charge", "reserve a", "reserve b", RELEASE, REFUND]
    log = store.load(xid)
    issued = [json.dumps(e.payload["compensation"]) for e in log
              if e.event_type == ev.COMMAND_ISSUED and "compensation" in e.payload]  # fmt: skip
    assert issued == ["0", "1"]  # the refund in flight was handed out again, not issued again
