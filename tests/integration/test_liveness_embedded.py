"""Liveness and stalls in the embedded mode (EmbeddedEngine, in-process workers): the
same engine service as the server, so the same outcomes as tests/acceptance's cluster."""

from __future__ import annotations

import asyncio
import dataclasses
import textwrap
from pathlib import Path
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine import describe
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store import port
from milepost.store.port import StoreUnavailable
from tests.shared import process_gone, wait_for_async

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/liveness}\n"


def of_type(store: Any, xid: int, etype: str) -> list[ev.Event]:
    return [e for e in store.load(xid) if e.event_type == etype]


# the first attempt writes its keys and waits for DIR/go; a later one only writes its keys
FIRST_WAITS = """
workflow:
  - step: start
    spec: {liveness: 1s}
    tool:
      kind: python
      input: {key: "{{ idempotency_key }}", op: "{{ operation_key }}"}
      code: |
        import os, time
        first = not os.path.exists("DIR/keys")
        open("DIR/keys", "a").write(key + " " + op + "\\n")
        deadline = time.monotonic() + 40
        while first and not os.path.exists("DIR/go") and time.monotonic() < deadline:
            time.sleep(0.02)
        result = key
"""


def test_a_silent_in_process_attempt_is_lost_after_its_liveness_and_issued_again(
    store: Any,
    tmp_path: Path,
) -> None:
    text = HEADER + textwrap.dedent(FIRST_WAITS.replace("DIR", str(tmp_path)))
    pb = load.load_text(text)

    def silent(*args: Any, **kwargs: Any) -> Any:  # its heartbeats never land: the claim
        # is live, so the attempt goes on (a refused one would be stopped) until its lease ends
        raise StoreUnavailable("this worker's heartbeats do not reach the database")

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            engine.service.heartbeat = silent  # type: ignore[method-assign]
            xid = engine.start(pb, text)
            try:
                return await engine.wait(xid, timeout=20)
            finally:
                (tmp_path / "go").touch()  # let the abandoned first attempt end

    state = asyncio.run(go())
    assert state.status == st.COMPLETED, state.error
    (key1, op1), (key2, op2) = [
        line.split() for line in (tmp_path / "keys").read_text().splitlines()
    ]
    assert key1 != key2 and op1 == op2, "a new attempt of the same operation"
    assert state.results["start"] == key2
    xid = state.execution_id
    [lost] = of_type(store, xid, ev.COMMAND_LEASE_EXPIRED)
    assert lost.payload["attempt"] == 1
    assert [e.payload["lease_s"] for e in of_type(store, xid, ev.COMMAND_ISSUED)] == [1.0, 1.0]
    claimed = of_type(store, xid, ev.COMMAND_CLAIMED)
    assert all(e.payload["lease_expires_at"] - e.created_at == pytest.approx(1.0) for e in claimed)


SLEEPS = """
workflow:
  - step: start
    spec: {liveness: 1500ms}
    tool: {kind: python, code: "import time\\ntime.sleep(4)\\nresult = 'slept'"}
"""


def test_an_in_process_attempt_heartbeating_past_its_liveness_is_never_lost(store: Any) -> None:
    """4 s of work, 1.5 s of liveness: the claim is extended every 0.5 s (a third of the
    step's own lease), not every 10 s (a third of the engine's)."""
    text = HEADER + textwrap.dedent(SLEEPS)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=1) as engine:
            return await engine.run(load.load_text(text), text, timeout=30)

    state = asyncio.run(go())
    assert state.status == st.COMPLETED, state.error
    assert state.results["start"] == "slept"
    assert of_type(store, state.execution_id, ev.COMMAND_LEASE_EXPIRED) == []
    assert len(of_type(store, state.execution_id, ev.COMMAND_ISSUED)) == 1


GATED = """
executor: {spec: {stall_after: 2s}}
workflow:
  - step: start
    tool: {kind: noop}
    spec: {approval: {approvers: ["role:ops"]}}
"""
QUEUED = """
executor: {spec: {stall_after: 2s}}
workflow:
  - step: start
    tool: {kind: python, code: "result = 'ran'"}
"""


def no_claims(engine: EmbeddedEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's workers take nothing from now on (`monkeypatch.undo()`: again), as
    behind a server whose workers are all gone: a queued command is all that is left."""
    monkeypatch.setattr(engine.workers, "claim_request", lambda driver: None)


def test_a_run_without_progress_for_stall_after_fails_naming_what_it_waited_for_but_not_one_waiting_for_people(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose one command nobody takes for 2 s stalls. A run as silent waiting for
    an approval does not (the approval has its own expiry)."""
    gated, queued = HEADER + textwrap.dedent(GATED), HEADER + textwrap.dedent(QUEUED)

    async def go() -> tuple[st.ExecutionState, st.ExecutionState]:
        async with EmbeddedEngine(store, concurrency=1) as engine:
            no_claims(engine, monkeypatch)
            waiting = engine.start(load.load_text(gated), gated)
            await wait_for_async(
                lambda: of_type(store, waiting, ev.APPROVAL_REQUESTED),
                "the approval request",
                timeout=10,
            )
            stalled = await engine.run(load.load_text(queued), queued, timeout=20)
            return stalled, engine.state(waiting)

    state, waiting = asyncio.run(go())
    assert state.status == st.FAILED
    assert state.error is not None and state.error["kind"] == "stalled"
    assert "step 'start' attempt 1 (queued, no worker took it)" in state.error["message"]
    assert [c["step"] for c in state.error["waiting"]["commands"]] == ["start"]
    *_, failed = store.load(state.execution_id)
    assert failed.event_type == ev.EXECUTION_FAILED
    [issued] = of_type(store, state.execution_id, ev.COMMAND_ISSUED)
    [stall] = of_type(store, state.execution_id, ev.EXECUTION_STALLED)
    assert stall.parent_event_id == issued.event_id, "caused by the last word before"
    # its open command settled by the engine (nobody will report it): the step failed, then the run
    [settled] = of_type(store, state.execution_id, ev.COMMAND_FAILED)
    assert settled.payload["error"]["kind"] == "stalled" and settled.seq > stall.seq
    assert state.step_status["start"] == st.FAILED
    assert waiting.status == st.RUNNING, "as long without progress, but waiting for people"
    assert time_of_last(store, waiting.execution_id) <= time_of_last(store, state.execution_id) - 2


def time_of_last(store: Any, xid: int) -> float:
    return store.load(xid)[-1].created_at


def _sleeper(seconds: float, spec: str = "") -> str:
    return HEADER + textwrap.dedent(f"""
        workflow:
          - step: start
            {spec}
            tool: {{kind: python, code: "import time\\ntime.sleep({seconds})\\nresult = 'slept'"}}
        """)


def test_the_engine_s_default_timeout_fails_a_heartbeating_attempt_of_a_step_without_one(
    store: Any,
) -> None:
    unbounded, bounded = _sleeper(3), _sleeper(3, "spec: {timeout: 10s}")

    async def go() -> tuple[st.ExecutionState, st.ExecutionState]:
        async with EmbeddedEngine(store, concurrency=2, default_timeout=1.5) as engine:
            a = engine.start(load.load_text(unbounded), unbounded)
            b = engine.start(load.load_text(bounded), bounded)
            return await engine.wait(a, timeout=20), await engine.wait(b, timeout=20)

    failed, completed = asyncio.run(go())
    assert failed.status == st.FAILED
    assert failed.error is not None and failed.error["kind"] == "timeout"
    assert failed.error["message"] == (
        "step ran longer than the engine's default_timeout of 1.5s (it sets no spec.timeout)"
    )
    assert of_type(store, failed.execution_id, ev.COMMAND_LEASE_EXPIRED) == []
    [timed_out] = of_type(store, failed.execution_id, ev.COMMAND_FAILED)
    assert timed_out.parent_event_id == timed_out.payload["command_id"], "caused by its issue"
    assert completed.status == st.COMPLETED, "its own spec.timeout bounds it, not the default"


def test_a_silent_attempt_inside_its_timeout_is_never_lost_though_the_engine_s_lease_is_shorter(
    store: Any,
) -> None:
    """DSL 10.2: a step with `spec.timeout` and no `spec.liveness` gets a lease past its
    timeout; the engine's own (0.5 s here) would have lapsed twice over."""
    text = _sleeper(2.5, "spec: {timeout: 5s}")

    def silent(*args: Any, **kwargs: Any) -> Any:  # its heartbeats never land: the claim
        # is live, so the attempt goes on (a refused one would be stopped) until its lease ends
        raise StoreUnavailable("this worker's heartbeats do not reach the database")

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=1, lease_s=0.5) as engine:
            engine.service.heartbeat = silent  # type: ignore[method-assign]
            return await engine.run(load.load_text(text), text, timeout=30)

    state = asyncio.run(go())
    assert state.status == st.COMPLETED, state.error
    assert of_type(store, state.execution_id, ev.COMMAND_LEASE_EXPIRED) == []
    [claimed] = of_type(store, state.execution_id, ev.COMMAND_CLAIMED)
    assert claimed.payload["lease_expires_at"] - claimed.created_at == pytest.approx(35.0)


HOLDS = """\
import os, time
open(out, "w").write(str(os.getpid()))
time.sleep(60)
result = "slept"
"""


@pytest.mark.parametrize(
    ("spec", "default_timeout"),
    [("", 1.0), ("    spec: {timeout: 1s}\n", None)],
    ids=["default_timeout", "spec.timeout"],
)
def test_a_timeout_stops_the_in_process_tool(
    store: Any, tmp_path: Path, spec: str, default_timeout: float | None
) -> None:
    out = tmp_path / "pid"
    code = textwrap.indent(HOLDS, " " * 8)
    text = HEADER + (
        "workflow:\n  - step: start\n" + spec + "    tool:\n      kind: python\n"
        f'      input: {{out: "{out}"}}\n      code: |\n{code}'
    )

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=1, default_timeout=default_timeout) as engine:
            state = await engine.run(load.load_text(text), text, timeout=30)
            pid = int(out.read_text())
            await wait_for_async(lambda: process_gone(pid), "the tool's process killed", timeout=10)
            return state

    state = asyncio.run(go())
    assert state.status == st.FAILED
    assert state.error is not None and state.error["kind"] == "timeout"


RETRIES_LATER = """
workload: {marker: ""}
executor: {spec: {stall_after: 2s}}
workflow:
  - step: start
    spec: {timeout: 1s, retry: {max_attempts: 2, delay: 4}}
    tool:
      kind: python
      input: {marker: "{{ workload.marker }}"}
      code: |
        import os, time
        if not os.path.exists(marker):
            open(marker, "w").write("first")
            time.sleep(5)
        result = "again"
"""


def test_a_run_waiting_for_its_retry_timer_past_stall_after_is_not_stalled(
    store: Any,
    tmp_path: Path,
) -> None:
    text = HEADER + textwrap.dedent(RETRIES_LATER)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=1) as engine:
            return await engine.run(
                load.load_text(text), text, {"marker": str(tmp_path / "marker")}, timeout=30
            )

    state = asyncio.run(go())
    assert state.status == st.COMPLETED, state.error
    assert state.results["start"] == "again"
    [timed_out] = of_type(store, state.execution_id, ev.COMMAND_FAILED)
    assert timed_out.payload["error"]["kind"] == "timeout"


STALLS_AFTER_A_COMPENSABLE_STEP = """
executor: {spec: {stall_after: 2s}}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import os, time
        open("DIR/started", "w").close()
        deadline = time.monotonic() + 40
        while not os.path.exists("DIR/go") and time.monotonic() < deadline:
            time.sleep(0.02)
        result = "booked"
    spec: {compensation: undo}
    next: wait
  - step: wait
    tool: {kind: noop}
  - step: undo
    tool:
      kind: python
      input: {was: "{{ compensation.result }}"}
      code: |
        open("DIR/undone", "a").write(was + "\\n")
        result = "undone"
"""


def test_a_stalled_run_runs_its_compensations_before_it_fails(
    store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stall ends the run as a failed step does (DSL 10.5): the command nobody took
    settled, each completed step's compensation once, then `execution.failed` of kind
    `stalled`. No worker takes `wait`; one takes the compensation."""
    text = HEADER + textwrap.dedent(STALLS_AFTER_A_COMPENSABLE_STEP).replace("DIR", str(tmp_path))

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            xid = engine.start(load.load_text(text), text)
            await wait_for_async(lambda: (tmp_path / "started").exists(), "'start' to run")
            no_claims(engine, monkeypatch)
            (tmp_path / "go").touch()
            await wait_for_async(
                lambda: of_type(store, xid, ev.EXECUTION_STALLED), "the stall", timeout=20
            )
            monkeypatch.undo()  # the compensation finds a worker
            return await engine.wait(xid, timeout=30)

    state = asyncio.run(go())
    assert state.status == st.FAILED
    assert state.error is not None and state.error["kind"] == "stalled"
    assert (tmp_path / "undone").read_text() == "booked\n"
    types = [e.event_type for e in store.load(state.execution_id)]
    assert types.index(ev.EXECUTION_STALLED) < types.index(ev.COMPENSATION_STARTED)
    assert types.count(ev.COMPENSATION_COMPLETED) == 1
    assert types[-1] == ev.EXECUTION_FAILED
    assert state.step_status["wait"] == st.FAILED


THEN_WAITS = """
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
    next: wait
  - step: wait
    tool:
      kind: python
      code: |
        import os, time
        deadline = time.monotonic() + 20
        while not os.path.exists("DIR/go") and time.monotonic() < deadline:
            time.sleep(0.02)
        result = 2
"""


def test_a_report_committed_before_a_stale_read_of_expired_claims_is_never_declared_lost(
    store: Any, tmp_path: Path
) -> None:
    """Issue 33, item 7, embedded: the poller's read of expired claims made before a
    database outage still lists `start`'s claim, whose report landed since: the claim is
    read again under the run's lock, nothing is expired, the attempt stays COMPLETED."""
    text = HEADER + textwrap.dedent(THEN_WAITS.replace("DIR", str(tmp_path)))
    started: list[int] = []
    stale_reads: list[list[port.CommandRow]] = []

    def read_before_the_outage(now: float) -> list[port.CommandRow]:
        ids = [
            int(e.payload["command_id"])
            for xid in started
            for e in of_type(store, xid, ev.COMMAND_ISSUED)
            if e.step == "start"
        ]
        done = [r for r in store.get_commands(ids).values() if r.status == "completed"]
        rows = [dataclasses.replace(r, status="claimed", lease_expires_at=now - 1) for r in done]
        if rows:
            stale_reads.append(rows)
        return rows

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=1) as engine:
            store.expired_claims = read_before_the_outage  # type: ignore[method-assign]
            started.append(engine.start(load.load_text(text), text))
            try:  # a second read: the tick of the first one is over
                await wait_for_async(lambda: len(stale_reads) >= 2, "two stale reads", timeout=10)
            finally:
                (tmp_path / "go").touch()
            return await engine.wait(started[0], timeout=20)

    state = asyncio.run(go())
    assert state.status == st.COMPLETED, state.error
    assert of_type(store, state.execution_id, ev.COMMAND_LEASE_EXPIRED) == []
    shown = describe.view(state, load.load_text(text), store.load(state.execution_id))
    assert [a["status"] for a in shown["steps"]["start"]["attempts"]] == ["COMPLETED"]
