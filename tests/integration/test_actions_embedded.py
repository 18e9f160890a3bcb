"""An operator's actions in the embedded mode, through the same engine service as behind
a server (`engine.actions`): a skip stops the step's running python process (its next
heartbeat is refused) and the run goes on with the result; a retry runs the waiting
attempt now."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine import actions
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from tests.integration.test_cancel_embedded import ONE, pids
from tests.shared import process_gone, wait_for_async

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/ops}\n"
FLAKY = HEADER + textwrap.dedent("""\
    workflow:
      - step: flaky
        tool:
          kind: python
          input: {out: "{{ workload.out }}"}
          code: |
            open(out, "a").write("x")
            if len(open(out).read()) < 2:
                raise RuntimeError("first attempt fails")
            result = "second"
        spec: {retry: {max_attempts: 3, delay: 3600, retry_on: [exception]}}
    """)


def test_skip_stops_the_running_attempt_and_the_run_goes_on(store: Any, tmp_path: Path) -> None:
    out = tmp_path / "pids"

    async def go() -> tuple[st.ExecutionState, int]:
        async with EmbeddedEngine(store, concurrency=2, lease_s=1.5) as engine:
            xid = engine.start(load.load_text(ONE), ONE, {"out": str(out)})
            [pid] = await wait_for_async(lambda: pids(out), "the python step to start")
            acted = actions.skip(engine.service, xid, "hold", {"by": "hand"}, "user:alice")
            assert acted.step_status == st.COMPLETED and len(acted.stopped) == 1
            state = await engine.wait(xid, timeout=10)
            await wait_for_async(lambda: process_gone(pid), f"python process {pid} to be stopped")
            return state, pid

    state, _ = asyncio.run(go())
    assert state.status == st.COMPLETED and state.results["hold"] == {"by": "hand"}
    assert state.step_status["after"] == st.COMPLETED
    [skip] = [e for e in store.load(state.execution_id) if e.event_type == ev.STEP_SKIP_REQUESTED]
    assert skip.payload["actor"] == "user:alice"


def test_retry_runs_the_waiting_attempt_now(store: Any, tmp_path: Path) -> None:
    out = tmp_path / "attempts"

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            xid = engine.start(load.load_text(FLAKY), FLAKY, {"out": str(out)})
            await wait_for_async(
                lambda: engine.state(xid).running["flaky"].retry_at, "the retry timer"
            )
            actions.retry(engine.service, xid, "flaky", "user:alice")
            return await engine.wait(xid, timeout=10)

    state = asyncio.run(go())
    assert state.status == st.COMPLETED and state.results["flaky"] == "second"
    assert out.read_text() == "xx"
