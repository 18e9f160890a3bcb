"""A saga for the compensation and teardown tests of both modes (DSL 10.5,
`executor.spec.teardown`): python steps whose side effect is a line in a file, so "ran
once, in this order" is checked outside the engine."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

from milepost.cli.runs import request_cancel
from milepost.core import state as st
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.orchestrator import Orchestrator
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
      input: {w: "{{ workload }}", c: "{{ compensation }}", s: "{{ compensation.result.stats }}"}
      code: |
        PRELUDE
        effect("release", "release " + json.dumps(c, sort_keys=True) + " " + json.dumps(s, sort_keys=True))
"""

TEARDOWN = """
  - step: cleanup
    tool:
      kind: python
      input: {w: "{{ workload }}", t: "{{ teardown }}"}
      code: |
        PRELUDE
        effect("cleanup", "cleanup " + t["status"] + " " + str((t["error"] or {}).get("step")))
  - step: notify
    tool:
      kind: python
      input: {w: "{{ workload }}", t: "{{ teardown }}"}
      code: |
        PRELUDE
        effect("notify", "notify " + t["status"])
"""
"""Two teardown steps (`executor.spec.teardown: [cleanup, notify]`): each writes the status
(and the failed step) its run ends with."""

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


def saga(tmp_path: Path, teardown: bool = False) -> tuple[Any, str]:
    """The saga's playbook and text; `teardown`: with `cleanup` and `notify` tearing down."""
    lines = []
    body = SAGA + TEARDOWN if teardown else SAGA
    for line in textwrap.dedent(body).splitlines():
        if line.strip() == "PRELUDE":
            pad = line[: len(line) - len(line.lstrip())]
            lines += [pad + code for code in PRELUDE.splitlines()]
        else:
            lines.append(line)
    head = HEADER + ("executor: {spec: {teardown: [cleanup, notify]}}\n" if teardown else "")
    text = head + "\n".join(lines).replace("DIR", str(tmp_path)) + "\n"
    return load.load_text(text), text


def run(
    store: Any, tmp_path: Path, workload: dict[str, Any], *, teardown: bool = False
) -> st.ExecutionState:
    """The saga (`teardown`: with its teardown steps) run to its end by an embedded engine
    on `store`."""
    pb, text = saga(tmp_path, teardown=teardown)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            xid = engine.start(pb, text, workload)
            return await engine.wait(xid, timeout=60)

    return asyncio.run(go())


def cancelled_while_shipping(
    store: Any, tmp_path: Path, *, teardown: bool = False
) -> st.ExecutionState:
    """The saga cancelled by its embedded engine while `ship` runs (its attempt stopped,
    killed, before its effect): the state the run ends in."""
    pb, text = saga(tmp_path, teardown=teardown)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            xid = engine.start(pb, text, {"fail": [], "gate": ["ship"]})
            await wait_for_async(lambda: (tmp_path / "ship.started").exists())
            engine.cancel(xid)
            return await engine.wait(xid, timeout=60)

    return asyncio.run(go())


def cancelled_from_the_cli(
    store: SQLiteStore, tmp_path: Path, workload: dict[str, Any], *, teardown: bool = False
) -> st.ExecutionState:
    """The saga run by an embedded engine on `store`, and cancelled as `milepost cancel`
    does (its request appended by another connection, behind the driver) while the step
    gated in `workload` waits at its gate: the state the run ends in."""
    pb, text = saga(tmp_path, teardown=teardown)
    [gate] = workload["gate"]

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            xid = engine.start(pb, text, workload)
            await wait_for_async(lambda: (tmp_path / f"{gate}.started").exists())
            other = SQLiteStore(store.path)
            try:
                request_cancel(other, xid, Orchestrator(other), "user:bob")
                # the driver's poller folds it before the gate opens
                await wait_for_async(lambda: engine.state(xid).cancel_requested)
            finally:
                other.close()
            (tmp_path / f"{gate}.gate").touch()
            return await engine.wait(xid, timeout=30)

    return asyncio.run(go())


def crashed(store: Any, tmp_path: Path, workload: dict[str, Any], *, teardown: bool = False) -> int:
    """A run of the saga whose engine goes away (a crash of its driver) while the step
    gated in `workload` waits at its gate: its id."""
    pb, text = saga(tmp_path, teardown=teardown)
    [gate] = workload["gate"]

    async def first_life() -> int:
        async with EmbeddedEngine(store) as engine:
            xid = engine.start(pb, text, workload)
            await wait_for_async(lambda: (tmp_path / f"{gate}.started").exists())
            return xid

    return asyncio.run(first_life())


def resumed(store: Any, tmp_path: Path, xid: int, gate: str) -> st.ExecutionState:
    """The run `xid` resumed by a new engine, its step at `gate` let go: how it ends."""

    async def second_life() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            engine.resume(xid)
            (tmp_path / f"{gate}.gate").touch()
            return await engine.wait(xid, timeout=60)

    return asyncio.run(second_life())


def effects(tmp_path: Path) -> list[str]:
    path = tmp_path / "effects"
    return path.read_text().splitlines() if path.exists() else []


REFUND = 'refund {"result": {"id": "ch_1"}, "run": 1, "step": "start"}'
RELEASE = (
    'release {"result": ["a", "b"], "run": 1, "step": "reserve"}'
    ' {"failed": 0, "success": 2, "total": 2}'
)
"""The loop's result keeps its `.stats` in both modes (the wire restores it)."""

DONE = ["charge", "reserve a", "reserve b"]
"""The effects of the steps before `ship`: the charge and the loop's two reservations."""
