"""Runs and their children in the embedded mode (issue 33, items 1 to 3), the same as
behind a server (tests/acceptance/test_children.py): a run that ends, however it ends,
cancels its running children; a child's progress and a heartbeating attempt keep a run
from being stalled; a `playbook` step whose child its own run's cancel ended exits
CANCELLED, one whose child was cancelled alone fails."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.run_graph import run_graph
from milepost.playbook import load
from tests.children_world import (
    CALLS_HOLDING,
    HOLDING_CHILD,
    SLOW_STEP,
    STEADY_CHILD,
    WAITS_ON_STEADY,
)
from tests.holding_step import pids
from tests.shared import process_gone, wait_for_async


def register(engine: EmbeddedEngine, *texts: str) -> None:
    for one in texts:
        engine.service.register(one, load.load_text(one))


def child_of(store: Any, parent: int) -> int | None:
    found = [r.execution_id for r in store.list_executions() if r.parent_execution_id == parent]
    return found[0] if found else None


def test_a_parent_waiting_on_a_child_that_makes_progress_is_not_stalled(store: Any) -> None:
    """Issue 33 item 1: the parent's stall window is 3 s and it writes nothing for 4.5 s
    while its child works, an event every 1.5 s: nothing stalled, both complete."""

    async def go() -> tuple[st.ExecutionState, st.ExecutionState]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            register(engine, STEADY_CHILD)
            xid = engine.start(load.load_text(WAITS_ON_STEADY), WAITS_ON_STEADY)
            parent = await engine.wait(xid, timeout=30)
            child = child_of(store, xid)
            assert child is not None
            return parent, engine.state(child)

    parent, child = asyncio.run(go())
    assert parent.status == st.COMPLETED, parent.error and parent.error["message"]
    assert parent.results["call"] == [1, 2, 3]
    assert child.status == st.COMPLETED


def test_a_heartbeating_step_longer_than_stall_after_is_not_stalled(store: Any) -> None:
    """Issue 33 item 3: a 5 s step with no `spec.timeout` and a 2 s stall window; its
    heartbeats write no event, and it is not failed for it."""

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=1) as engine:
            return await engine.run(load.load_text(SLOW_STEP), SLOW_STEP, timeout=30)

    state = asyncio.run(go())
    assert state.status == st.COMPLETED, state.error
    assert state.results["think"] == "thought"


def test_a_parent_failed_by_the_engine_s_timeout_cancels_its_running_child(
    store: Any, tmp_path: Path
) -> None:
    """Issue 33 item 1: the parent's `playbook` attempt is failed by the engine's
    default_timeout while its child holds a python step: the child is cancelled (its
    python process killed), and the run is not seen ended before its child is."""
    out = tmp_path / "pids"

    async def go() -> tuple[st.ExecutionState, st.ExecutionState, int]:
        async with EmbeddedEngine(store, concurrency=2, default_timeout=2.0) as engine:
            register(engine, HOLDING_CHILD)
            xid = engine.start(load.load_text(CALLS_HOLDING), CALLS_HOLDING, {"out": str(out)})
            [pid] = await wait_for_async(lambda: pids(out), "the child's step to start")
            parent = await engine.wait(xid, timeout=20)
            child = child_of(store, xid)
            assert child is not None
            return parent, engine.state(child), pid

    parent, child, pid = asyncio.run(go())
    assert parent.status == st.FAILED and parent.error is not None
    assert parent.error["kind"] == "timeout"
    assert child.status == st.CANCELLED
    assert process_gone(pid)
    [request] = [
        e.payload
        for e in store.load(child.execution_id)
        if e.event_type == ev.EXECUTION_CANCEL_REQUESTED
    ]
    assert request == {"cause": f"parent {parent.execution_id} failed"}


def test_a_cancelled_parent_s_playbook_step_exits_cancelled(store: Any, tmp_path: Path) -> None:
    """Issue 33 item 2: the parent's cancel cancels the child; the step that waited on it
    was stopped by its own run's cancel: CANCELLED, in its status and on the graph."""
    out = tmp_path / "pids"

    async def go() -> tuple[st.ExecutionState, st.ExecutionState, dict[str, Any]]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            register(engine, HOLDING_CHILD)
            xid = engine.start(load.load_text(CALLS_HOLDING), CALLS_HOLDING, {"out": str(out)})
            await wait_for_async(lambda: pids(out), "the child's step to start")
            engine.cancel(xid, "user:alice")
            parent = await engine.wait(xid, timeout=20)
            child = child_of(store, xid)
            assert child is not None
            return parent, engine.state(child), engine.service.read(xid, run_graph)

    parent, child, graph = asyncio.run(go())
    assert parent.status == st.CANCELLED and child.status == st.CANCELLED
    assert parent.step_status["call"] == st.CANCELLED
    assert {n["id"]: n["status"] for n in graph["nodes"]}["call"] == st.CANCELLED


def test_a_playbook_step_whose_child_alone_was_cancelled_fails(store: Any, tmp_path: Path) -> None:
    """Issue 33 item 2, the other side: the parent was not cancelled, its child was
    (DSL 3.5: a CANCELLED child is a task error of kind `playbook`)."""
    out = tmp_path / "pids"

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            register(engine, HOLDING_CHILD)
            xid = engine.start(load.load_text(CALLS_HOLDING), CALLS_HOLDING, {"out": str(out)})
            await wait_for_async(lambda: pids(out), "the child's step to start")
            child = child_of(store, xid)
            assert child is not None
            engine.cancel(child, "user:alice")
            return await engine.wait(xid, timeout=20)

    parent = asyncio.run(go())
    assert parent.status == st.FAILED and parent.error is not None
    assert parent.step_status["call"] == st.FAILED
    assert parent.error["kind"] == "playbook" and "CANCELLED" in parent.error["message"]
