"""The embedded engine on a real SQLite file: snapshots, retries, resume, big results."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import socket
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from milepost.core import decide as dc
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.credentials import new_key
from milepost.engine import orchestrator as orchestrator_module
from milepost.engine.drivers import DriverLost
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.orchestrator import Orchestrator
from milepost.engine.seal import Sealer, WorkloadUnreadable
from milepost.errors import MilepostError, PlaybookInvalid
from milepost.playbook import load
from milepost.store.port import DriverBusy, EventIdConflict, StoreUnavailable
from milepost.store.sqlite import SQLiteStore
from tests.integration.stores import SnapshotsSeen
from tests.reports import completed
from tests.shared import wait_for_async
from tests.sql import query

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/engine}\n"


def text_of(body: str) -> str:
    return HEADER + textwrap.dedent(body)


async def run(
    store: SQLiteStore, body: str, workload: dict[str, Any] | None = None, **engine_kw: Any
) -> st.ExecutionState:
    text = text_of(body)
    async with EmbeddedEngine(store, **engine_kw) as engine:
        return await engine.run(load.load_text(text), text, workload, timeout=60)


LOOP = """
workflow:
  - step: start
    loop: {in: "{{ range(30) | list }}", iterator: i, spec: {mode: parallel, max_in_flight: 4}}
    tool: {kind: python, input: {i: "{{ i }}"}, code: "result = {'sq': i * i}"}
    set: {ctx.count: "{{ start | length }}"}
    next: total
  - step: total
    tool: {kind: python, input: {rows: "{{ start }}"}, code: "result = sum(r['sq'] for r in rows)"}
"""


def test_state_rebuilt_from_a_snapshot_equals_the_fold_of_the_whole_log(store: Any) -> None:
    state = asyncio.run(run(store, LOOP))
    assert state.status == st.COMPLETED and state.results["total"] == sum(i * i for i in range(30))
    # force snapshots every few events, then rebuild twice: from the snapshot and from zero
    orchestrator = Orchestrator(store, snapshot_every=7)
    events = store.load(state.execution_id)
    partial = fl.fold(None, events[:40])
    orchestrator._states[state.execution_id] = partial
    orchestrator._maybe_snapshot(partial)
    assert store.load_snapshot(state.execution_id)[0] == partial.last_seq
    rebuilt = Orchestrator(store).state(state.execution_id)
    assert rebuilt == fl.fold(None, events)
    assert rebuilt.ctx == {"count": 30}


FLAKY = """
workload: {marker: MARKER}
workflow:
  - step: start
    spec: {timeout: 2s, retry: {max_attempts: 3, backoff: fixed, delay: 0.1, retry_on: [timeout]}}
    tool:
      kind: python
      input: {marker: "{{ workload.marker }}"}
      code: |
        import os, time
        first = not os.path.exists(marker)
        open(marker, "a").write(idempotency_key + "\\n")
        if first:
            time.sleep(30)
        result = {"ok": True}
"""


def test_spec_retry_reruns_a_timed_out_attempt_with_a_new_idempotency_key(
    store: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    state = asyncio.run(run(store, FLAKY.replace("MARKER", str(marker))))
    assert state.status == st.COMPLETED, state.error
    keys = marker.read_text().split()
    assert len(keys) == 2 and keys[0] != keys[1]
    types = [e.event_type for e in store.load(state.execution_id)]
    assert types.count(ev.COMMAND_RETRY_SCHEDULED) == 1
    assert types.count(ev.COMMAND_FAILED) == 1 and types.count(ev.COMMAND_ISSUED) == 2


def test_a_run_resumed_by_a_new_engine_reuses_the_live_command(store: Any, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    body = f"""
    workflow:
      - step: start
        tool: {{kind: python, code: "result = 1"}}
        next: wait
      - step: wait
        tool:
          kind: python
          code: |
            import os, time
            open("{tmp_path}/attempts", "a").write(idempotency_key + "\\n")
            deadline = time.monotonic() + 60
            while not os.path.exists("{gate}") and time.monotonic() < deadline:
                time.sleep(0.01)
            result = 2
    """
    text = text_of(body)
    pb = load.load_text(text)

    async def first_life() -> int:
        async with EmbeddedEngine(store) as engine:
            engine.orchestrator.register(text, pb)
            # start the run but leave before `wait` reports: the process "dies" there
            xid = engine._start(pb, 1, {})  # its driver lease taken, its first command claimed
            attempts = tmp_path / "attempts"
            # `wait` is running and will not report
            await wait_for_async(attempts.exists, "the step to start")
            return xid

    xid = asyncio.run(first_life())
    assert Orchestrator(store).state(xid).status == st.RUNNING
    gate.touch()

    async def second_life() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            engine.resume(xid)
            return await engine.wait(xid, timeout=30)

    state = asyncio.run(second_life())
    assert state.status == st.COMPLETED and state.results == {"start": 1, "wait": 2}
    assert state.run_counts == {"start": 1, "wait": 1}
    keys = (tmp_path / "attempts").read_text().split()
    assert len(set(keys)) == 1  # the re-dispatched command kept its idempotency key


def test_a_large_result_is_stored_by_reference_and_read_back_whole(store: Any) -> None:
    state = asyncio.run(
        run(
            store,
            """
    workflow:
      - step: start
        tool: {kind: python, code: "result = {'blob': 'x' * 600000}"}
        next: size
      - step: size
        tool: {kind: python, input: {b: "{{ start.blob }}"}, code: "result = len(b)"}
    """,
        )
    )
    assert state.status == st.COMPLETED and state.results["size"] == 600000
    assert query(store, "SELECT count(*) FROM result_blob", ())[0][0] >= 1
    biggest = query(store, "SELECT max(length(result)) FROM event", ())[0][0]
    assert biggest < 10_000  # the log itself stays small
    reread = Orchestrator(store).state(state.execution_id)
    assert reread.results["start"]["blob"] == "x" * 600000


CHILD = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child, path: tests/child}
workload: {x: 1}
workflow:
  - step: start
    tool: {kind: python, input: {x: "{{ workload.x }}"}, code: "result = {'double': x * 2}"}
    next: finish
  - step: finish
    tool: {kind: python, input: {d: "{{ start.double }}"}, code: "result = {'final': d + 1}"}
"""

PARENT = """
workflow:
  - step: start
    loop: {in: "{{ [1, 2, 3] }}", iterator: n, spec: {mode: parallel, max_in_flight: 3}}
    tool: {kind: playbook, path: tests/child, input: {x: "{{ n }}"}, return_step: start}
    next: whole
  - step: whole
    tool: {kind: playbook, path: tests/child, input: {x: 10}, return_result: true}
    next: plain
  - step: plain
    tool: {kind: playbook, path: tests/child}
"""


def test_playbook_tool_runs_children_and_returns_their_results(store: Any) -> None:
    async def go() -> st.ExecutionState:
        # one worker only: the parents waiting on children must lend theirs back
        async with EmbeddedEngine(store, concurrency=1) as engine:
            engine.orchestrator.register(CHILD, load.load_text(CHILD))
            text = text_of(PARENT)
            return await engine.run(load.load_text(text), text, timeout=60)

    state = asyncio.run(go())
    assert state.status == st.COMPLETED, state.error
    assert state.results["start"] == [{"double": 2}, {"double": 4}, {"double": 6}]
    assert state.results["whole"] == {"final": 21}
    assert state.results["plain"]["status"] == "COMPLETED"
    children = [r for r in store.list_executions() if r.parent_execution_id == state.execution_id]
    assert len(children) == 5
    # each child names the command (one per loop iteration and step) that started it
    issued = {
        e.event_id for e in store.load(state.execution_id) if e.event_type == ev.COMMAND_ISSUED
    }
    started_by = {store.load(c.execution_id)[0].payload["parent_command_id"] for c in children}
    assert len(started_by) == 5 and started_by <= issued


def test_a_failing_child_fails_the_parent_step_with_its_reason(store: Any) -> None:
    broken = CHILD.replace("x * 2", "x / 0")

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            engine.orchestrator.register(broken, load.load_text(broken))
            text = text_of("""
            workflow:
              - step: start
                tool: {kind: playbook, path: tests/child}
            """)
            return await engine.run(load.load_text(text), text, timeout=60)

    state = asyncio.run(go())
    assert state.status == st.FAILED
    assert state.error["kind"] == "playbook"
    assert "ZeroDivisionError" in state.error["reason"]


class BrokenSnapshots(SQLiteStore):
    def save_snapshot(self, execution_id: int, seq: int, data: bytes) -> None:
        raise StoreUnavailable("disk full", execution_id=str(execution_id))


def test_snapshots_are_spaced_by_the_size_of_the_run_so_they_cost_a_few_times_the_last(
    tmp_path: Path,
) -> None:
    # each snapshot pickles the whole fold: every 10 events, a 600-event loop's would have
    # been 60 snapshots of a growing state (their bytes the square of the run's length)
    store = SnapshotsSeen(tmp_path / "counted.db")
    text = text_of(LOOP.replace("range(30)", "range(200)"))

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            engine.orchestrator.snapshot_every = 10
            return await engine.run(load.load_text(text), text, timeout=60)

    try:
        state = asyncio.run(go())
        assert state.status == st.COMPLETED
        assert state.results["total"] == sum(i * i for i in range(200))
        seqs = [seq for seq, _ in store.saved]
        assert len(seqs) <= 12, seqs  # 10, 15, 22, ... up to the run's 600-odd events
        assert all(b >= 1.4 * a for a, b in itertools.pairwise(seqs)), seqs
        # a snapshot's size follows what is in flight when it is taken, which timing moves
        # (4.9 times the last under a loaded CI once); every 10 events it would be ~30 times
        assert sum(size for _, size in store.saved) < 6 * store.saved[-1][1]
        # and a rebuild still replays at most about a third of the log
        assert state.last_seq - seqs[-1] <= state.last_seq / 3 + 10
    finally:
        store.close()


def test_a_failed_snapshot_write_is_logged_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = BrokenSnapshots(tmp_path / "broken.db")
    text = text_of(LOOP)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(broken) as engine:
            engine.orchestrator.snapshot_every = 5
            return await engine.run(load.load_text(text), text, timeout=60)

    try:
        with caplog.at_level(logging.WARNING, logger="milepost.engine.orchestrator"):
            state = asyncio.run(go())
        assert state.status == st.COMPLETED
        assert state.results["total"] == sum(i * i for i in range(30))
        warned = [r for r in caplog.records if r.message.startswith("snapshot of execution")]
        assert warned and all(r.execution_id == state.execution_id for r in warned)  # type: ignore[attr-defined]
        assert broken.load_snapshot(state.execution_id) is None
    finally:
        broken.close()


TWO_STEPS = """
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
    next: after
  - step: after
    tool: {kind: python, code: "result = 2"}
"""


def _raise_once_start_is_done(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    real = dc.decide

    def decide(state: st.ExecutionState, *args: Any) -> dc.Decision:
        if "start" in state.results:
            raise exc
        return real(state, *args)

    monkeypatch.setattr(dc, "decide", decide)


def test_an_engine_error_in_the_embedded_mode_ends_the_run_failed(
    store: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _raise_once_start_is_done(monkeypatch, KeyError("missing"))
    with caplog.at_level(logging.ERROR, logger="milepost.engine.orchestrator"):
        state = asyncio.run(run(store, TWO_STEPS))
    assert state.status == st.FAILED
    assert state.error is not None
    assert (state.error["kind"], state.error["message"]) == ("engine", "KeyError: 'missing'")
    events = store.load(state.execution_id)
    assert [e.event_type for e in events][-2:] == [ev.COMMAND_COMPLETED, ev.EXECUTION_FAILED]
    assert state == fl.fold(None, events)  # the cached state is the fold of what was stored
    [logged] = [r for r in caplog.records if r.message.startswith("engine error")]
    assert logged.exc_info is not None and logged.exc_info[0] is KeyError


def _started_with_a_report(store: Any) -> tuple[Orchestrator, int, ev.Event]:
    """A run of TWO_STEPS started on `store`, and the report of its first command."""
    text = text_of(TWO_STEPS)
    pb = load.load_text(text)
    orchestrator = Orchestrator(store)
    _, version = orchestrator.register(text, pb)
    xid, outcome = orchestrator.start(pb, version, {})
    [(_, cmd)] = outcome.issued
    return orchestrator, xid, completed(orchestrator, xid, cmd)


def test_a_store_error_while_deciding_is_not_an_engine_error(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    orchestrator, xid, report = _started_with_a_report(store)
    _raise_once_start_is_done(monkeypatch, StoreUnavailable("database down"))
    before = len(store.load(xid))
    with pytest.raises(StoreUnavailable):
        orchestrator.process([report])
    assert len(store.load(xid)) == before  # nothing half written: the worker retries the report
    assert orchestrator.state(xid).status == st.RUNNING


ONE_STEP = """
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
"""


def _late_report(store: Any, xid: int, new_id: Any, now: float) -> ev.Event:
    [issued] = [e for e in store.load(xid) if e.event_type == ev.COMMAND_ISSUED]
    payload = {
        "command_id": issued.payload["command_id"],
        "run": 1,
        "index": -1,
        "attempt": 1,
        "epoch": 1,
        "result": 2,
    }
    return ev.new_event(
        new_id(), xid, ev.COMMAND_COMPLETED, now, step="start", payload=payload, meta={"epoch": 1}
    )


def test_nothing_is_appended_after_a_runs_terminal_event(store: Any) -> None:
    state = asyncio.run(run(store, ONE_STEP))
    xid = state.execution_id
    before = store.load(xid)
    assert before[-1].event_type == ev.EXECUTION_COMPLETED
    orchestrator = Orchestrator(store, machine_id=3)
    cancel = orchestrator.request_cancel(xid)
    late = orchestrator.process([_late_report(store, xid, orchestrator.new_id, 1.0)])
    assert cancel.events == [] and [e.event_type for e in cancel.ignored] == [
        ev.EXECUTION_CANCEL_REQUESTED
    ]
    assert late.events == [] and [e.event_type for e in late.ignored] == [ev.COMMAND_COMPLETED]
    assert store.load(xid) == before


def test_a_server_that_did_not_see_the_end_appends_nothing_after_it(store: Any) -> None:
    text = text_of(ONE_STEP)
    first = Orchestrator(store, machine_id=1, shared=True)
    _, version = first.register(text, load.load_text(text))
    xid, _ = first.start(load.load_text(text), version, {})
    # another server ends the run; `first` still holds the RUNNING state in its cache
    other = Orchestrator(store, machine_id=2, shared=True)
    assert other.process([_late_report(store, xid, other.new_id, 1.0)]).finished
    assert store.load(xid)[-1].event_type == ev.EXECUTION_COMPLETED
    assert first.cached(xid) is not None and not first.cached(xid).terminal
    outcome = first.request_cancel(xid)
    assert outcome.events == [] and len(outcome.ignored) == 1
    assert store.load(xid)[-1].event_type == ev.EXECUTION_COMPLETED


def test_milepost_cancel_appends_nothing_after_an_end_it_did_not_see(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import typer

    from milepost.cli import runs

    xid = asyncio.run(run(store, ONE_STEP)).execution_id
    log = store.load(xid)
    real = Orchestrator.state
    reads: list[int] = []

    def read_before_the_end(self: Orchestrator, execution_id: int, **kw: Any) -> st.ExecutionState:
        # the first read happens just before the engine (another process) appends the end
        reads.append(execution_id)
        if len(reads) > 1:
            return real(self, execution_id, **kw)
        state = fl.fold(None, log[:-1])
        self._states[execution_id] = state
        return state

    monkeypatch.setattr(Orchestrator, "state", read_before_the_end)
    with pytest.raises(typer.Exit):
        runs.request_cancel(store, xid, Orchestrator(store))
    assert len(reads) == 2 and store.load(xid) == log


# -- one driver per execution --------------------------------------------------------------

GATED = """
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import os, time
        open("DIR/attempts", "a").write(idempotency_key + "\\n")
        deadline = time.monotonic() + 60
        while not os.path.exists("DIR/gate") and time.monotonic() < deadline:
            time.sleep(0.01)
        open("DIR/finished", "a").write(idempotency_key + "\\n")
        result = 1
    next: after
  - step: after
    tool: {kind: noop}
"""


def gated(tmp_path: Path) -> tuple[str, Any]:
    text = text_of(GATED.replace("DIR", str(tmp_path)))
    return text, load.load_text(text)


async def first_life(store: Any, tmp_path: Path) -> int:
    """Start a gated run and leave while its first step waits (the process "dies" there)."""
    text, pb = gated(tmp_path)
    async with EmbeddedEngine(store) as engine:
        xid = engine.start(pb, text)
        assert store.get_driver(xid).holder == engine.holder
        assert store.get_driver(xid).expires_at > time.time() + 10
        await wait_for_async((tmp_path / "attempts").exists, "the first attempt to start")
    assert store.get_driver(xid).expires_at <= time.time()  # a clean exit released it
    return xid


def test_an_engine_that_lost_its_run_to_another_process_stops_driving_it(
    store: Any, tmp_path: Path
) -> None:
    text, pb = gated(tmp_path)

    async def go() -> tuple[int, BaseException]:
        async with EmbeddedEngine(store, driver_ttl=0.6) as engine:
            assert re.fullmatch(
                rf"{re.escape(socket.gethostname())}:{os.getpid()}:[0-9a-f]+", engine.holder
            )
            xid = engine.start(pb, text)
            await wait_for_async((tmp_path / "attempts").exists, "the first attempt to start")
            # another process takes the run over (as resume does from a holder it knows is dead)
            store.acquire_driver(xid, "elsewhere:1:thief", time.time(), 60, replace=engine.holder)
            with pytest.raises(DriverLost) as lost:
                await engine.wait(xid, timeout=20)
            (tmp_path / "gate").touch()
            await wait_for_async(
                lambda: (
                    (tmp_path / "finished").exists()
                    and engine.workers.busy == 0
                    and engine._reports.empty()
                ),
                "the gated step to end",
            )
            return xid, lost.value

    xid, lost = asyncio.run(go())
    assert (
        lost.message == f"execution {xid} was taken over by elsewhere:1:thief; this process"
        " stopped driving it"
    )
    types = [e.event_type for e in store.load(xid)]
    # no report kept, no claim given back: the log ends with the lost engine's claim
    assert types == [ev.EXECUTION_STARTED, ev.STEP_ENTER, ev.COMMAND_ISSUED, ev.COMMAND_CLAIMED]
    assert store.get_driver(xid).holder == "elsewhere:1:thief"  # its exit released nothing


def test_resume_waits_for_a_lease_of_another_host_to_expire_then_takes_over(
    store: Any, tmp_path: Path
) -> None:
    xid = asyncio.run(first_life(store, tmp_path))
    store.acquire_driver(xid, "elsewhere:1:dead", time.time(), 1.0)  # then it died
    (tmp_path / "gate").touch()
    waited: list[Any] = []

    async def second_life() -> tuple[st.ExecutionState, str]:
        async with EmbeddedEngine(store) as engine:
            await engine.take_over(xid, on_wait=waited.append)
            assert store.get_driver(xid).holder == engine.holder
            return await engine.wait(xid, timeout=30), engine.holder

    state, holder = asyncio.run(second_life())
    assert [lease.holder for lease in waited] == ["elsewhere:1:dead"]
    assert state.status == st.COMPLETED and state.run_counts == {"start": 1, "after": 1}


def test_resume_refuses_a_lease_of_another_host_that_is_renewed(store: Any, tmp_path: Path) -> None:
    xid = asyncio.run(first_life(store, tmp_path))
    store.acquire_driver(xid, "elsewhere:1:alive", time.time(), 1.0)
    before = store.event_count(xid)

    async def second_life() -> BaseException:
        async def keep_renewing() -> None:
            while True:
                await asyncio.sleep(0.1)
                store.renew_driver(xid, "elsewhere:1:alive", time.time(), 1.0)

        renewing = asyncio.create_task(keep_renewing())
        try:
            async with EmbeddedEngine(store) as engine:
                with pytest.raises(DriverBusy) as refused:
                    await engine.take_over(xid)
                return refused.value
        finally:
            renewing.cancel()

    refused = asyncio.run(second_life())
    assert refused.fields["holder"] == "elsewhere:1:alive"
    assert str(refused).startswith(f"execution {xid} is driven by elsewhere:1:alive until ")
    assert store.event_count(xid) == before  # nothing written
    assert (tmp_path / "attempts").read_text().count("\n") == 1  # nothing run again


@pytest.mark.parametrize("ttl", [0.0, -1.0, float("nan")])
def test_a_driver_ttl_that_is_not_positive_is_refused(store: Any, ttl: float) -> None:
    with pytest.raises(MilepostError, match="driver lease ttl must be a positive") as refused:
        EmbeddedEngine(store, driver_ttl=ttl)
    assert refused.value.fields == {"setting": "MILEPOST_DRIVER_TTL"}


def test_resume_takes_over_at_once_from_a_holder_of_this_host_that_is_gone(
    store: Any, tmp_path: Path
) -> None:
    xid = asyncio.run(first_life(store, tmp_path))
    child = subprocess.Popen(["true"])
    child.wait()  # reaped: its pid names no process now, as after a kill -9
    store.acquire_driver(xid, f"{socket.gethostname()}:{child.pid}:x", time.time(), 600.0)
    (tmp_path / "gate").touch()
    waited: list[Any] = []

    async def second_life() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            # far less than the lease's ten minutes: without the pid check it would wait them
            await asyncio.wait_for(engine.take_over(xid, on_wait=waited.append), 10)
            return await engine.wait(xid, timeout=30)

    assert asyncio.run(second_life()).status == st.COMPLETED
    assert waited == []  # no wait for a lease that had ten minutes left


# --------------------------------------------------------------------------- secrets

DB_CREDENTIAL = {
    "type": "postgres",
    "host": "db.internal",
    "user": "etl",
    "password": "pa55-w0rd-xyz",
    "database": "warehouse",
}
PRINTS_CREDENTIAL = """
keychain:
  - {name: db, kind: credential, credential: warehouse}
workflow:
  - step: connect
    tool:
      kind: python
      input: {host: "{{ keychain.db.host }}", user: "{{ keychain.db.user }}",
              password: "{{ keychain.db.password }}"}
      code: |
        print(f"connecting to {host} as {user} with {password}")
        print("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl")
        result = {"said": f"connected to {host} as {user}", "pw": password}
"""


def test_a_steps_output_is_logged_redacted_and_names_its_execution_and_step(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="milepost.tools.python.output")
    lookup = {"warehouse": DB_CREDENTIAL}.get
    state = asyncio.run(run(store, PRINTS_CREDENTIAL, credentials=lookup))
    assert state.status == st.COMPLETED, state.error
    (record,) = [r for r in caplog.records if r.name == "milepost.tools.python.output"]
    message = record.getMessage()
    assert "pa55-w0rd-xyz" not in caplog.text and "eyJzdWIi" not in caplog.text
    assert "connecting to db.internal as etl with ***" in message
    assert "token ***" in message
    assert f"execution {state.execution_id}" in message and "step connect" in message
    assert record.__dict__["execution_id"] == str(state.execution_id)
    assert record.__dict__["step"] == "connect"


def test_only_a_credentials_secret_fields_are_masked_in_the_result(store: Any) -> None:
    lookup = {"warehouse": DB_CREDENTIAL}.get
    state = asyncio.run(run(store, PRINTS_CREDENTIAL, credentials=lookup))
    assert state.results["connect"] == {"said": "connected to db.internal as etl", "pw": "***"}
    assert "pa55-w0rd-xyz" not in str(query(store, "SELECT * FROM event", ()))


READS_PASSWORD = """
workflow:
  - step: start
    tool:
      kind: python
      input: {password: "{{ workload.password }}", user: "{{ workload.user }}"}
      code: "result = {'ok': password == 'hunter2-real', 'user': user, 'echo': password}"
"""


def _started(store: SQLiteStore, xid: int) -> ev.Event:
    return next(e for e in store.load(xid) if e.event_type == ev.EXECUTION_STARTED)


@pytest.mark.parametrize("key", [None, new_key()], ids=["no-key", "key"])
def test_a_sensitive_workload_value_is_masked_in_the_log_and_real_for_the_step(
    store: Any, monkeypatch: pytest.MonkeyPatch, key: str | None
) -> None:
    if key is None:
        monkeypatch.delenv("MILEPOST_SECRET_KEY", raising=False)
    else:
        monkeypatch.setenv("MILEPOST_SECRET_KEY", key)
    workload = {"password": "hunter2-real", "user": "ada"}
    state = asyncio.run(run(store, READS_PASSWORD, workload))
    assert state.status == st.COMPLETED, state.error
    # the step got the real value; what it echoes is masked like any secret
    assert state.results["start"] == {"ok": True, "user": "ada", "echo": "***"}
    started = _started(store, state.execution_id)
    assert started.payload["workload"] == {"password": "***", "user": "ada"}
    assert "hunter2-real" not in str(query(store, "SELECT * FROM event", ()))
    sealed = store.get_blob(started.payload["sealed_workload"])
    assert (b"hunter2-real" in sealed) is (key is None)  # encrypted when a key is set
    # a new engine (a resume) opens the sealed workload again
    assert Orchestrator(store).state(state.execution_id).workload == workload


def test_a_sealed_run_is_not_snapshotted_and_needs_its_key_to_rebuild(store: Any) -> None:
    orchestrator = Orchestrator(store, snapshot_every=1, secret_key=new_key())
    pb = load.load_text(text_of(READS_PASSWORD))
    orchestrator.register(text_of(READS_PASSWORD), pb)
    xid, _ = orchestrator.start(pb, 1, {"password": "hunter2-real"})
    assert orchestrator.state(xid).workload == {"password": "hunter2-real"}
    assert store.load_snapshot(xid) is None
    reopened = Orchestrator(store, secret_key="")  # no key: the sealed entry is unreadable
    with pytest.raises(WorkloadUnreadable) as info:
        reopened.state(xid)
    assert info.value.code == "workload_unreadable"


def test_a_workload_without_secrets_is_not_sealed(store: Any) -> None:
    state = asyncio.run(run(store, READS_PASSWORD, {"password": "", "user": "ada"}))
    assert "sealed_workload" not in _started(store, state.execution_id).payload


DERIVES_PASSWORD = """
workflow:
  - step: start
    tool: {kind: noop}
    set: {ctx.conn: "db://{{ workload.password }}"}
    next: {arcs: [{step: use, args: {p: "{{ workload.password }}"}}]}
  - step: use
    tool:
      kind: python
      input: {pw: "{{ workload.password }}", conn: "{{ ctx.conn }}"}
      code: "result = {'ok': pw == p == 'hunter2real' and conn == 'db://hunter2real'}"
"""


def _stored_text(store: SQLiteStore) -> str:
    return str(query(store, "SELECT * FROM event", ())) + str(
        query(store, "SELECT * FROM snapshot", ())
    )


def test_a_value_derived_from_a_sealed_workload_stays_out_of_the_log_and_snapshots(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MILEPOST_SECRET_KEY", new_key())

    async def with_snapshots() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            engine.orchestrator.snapshot_every = 1  # a snapshot after every event, were any kept
            text = text_of(DERIVES_PASSWORD)
            return await engine.run(
                load.load_text(text), text, {"password": "hunter2real"}, timeout=60
            )

    state = asyncio.run(with_snapshots())
    assert state.status == st.COMPLETED, state.error
    assert state.results["use"] == {"ok": True}  # the steps read the real values
    assert "hunter2real" not in _stored_text(store)
    assert "***" in _stored_text(store)  # ctx.conn and the arc's args, as the log keeps them
    assert store.load_snapshot(state.execution_id) is None


def _sealed_run(
    store: SQLiteStore, body: str, orchestrator: Orchestrator | None = None
) -> tuple[int, Any]:
    """A sealed run started, and the report of its first command (not processed yet)."""
    orchestrator = orchestrator or Orchestrator(store, secret_key=new_key())
    text = text_of(body)
    pb = load.load_text(text)
    _, version = orchestrator.register(text, pb)
    xid, outcome = orchestrator.start(pb, version, {"password": "hunter2real"})
    [(_, cmd)] = outcome.issued
    return xid, completed(orchestrator, xid, cmd)


def test_a_report_to_a_run_whose_workload_cannot_be_opened_ends_it_failed(store: Any) -> None:
    xid, report = _sealed_run(store, DERIVES_PASSWORD)
    keyless = Orchestrator(store, secret_key="", machine_id=1)  # a process of its own ids
    outcome = keyless.process([report])
    assert outcome.engine_errors == [xid]
    [log_end] = store.load(xid)[-1:]
    assert log_end.event_type == ev.EXECUTION_FAILED
    error = keyless.state(xid, workload=False).error
    assert error is not None and (error["kind"], error["code"]) == ("engine", "workload_unreadable")


def test_milepost_cancel_of_a_run_whose_workload_cannot_be_opened(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from milepost.cli import runs

    xid, _ = _sealed_run(store, DERIVES_PASSWORD)
    monkeypatch.setenv("MILEPOST_SECRET_KEY", "")
    runs.request_cancel(store, xid, Orchestrator(store, machine_id=1))  # ids apart from the run's
    assert store.load(xid)[-1].event_type == ev.EXECUTION_CANCEL_REQUESTED


def test_a_catalog_entry_that_no_longer_loads_ends_the_run_failed(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, xid, report = _started_with_a_report(store)

    def stricter(*args: Any, **kw: Any) -> Any:
        raise PlaybookInvalid(["a stricter loader refuses this entry"])

    monkeypatch.setattr(load, "load_text", stricter)
    restarted = Orchestrator(store, machine_id=1)  # a restart (own ids): nothing parsed yet
    assert restarted.process([report]).engine_errors == [xid]
    state = restarted.state(xid)
    assert state.status == st.FAILED and state.error is not None
    assert "stricter loader" in state.error["message"]
    assert [e.event_type for e in store.load(xid)][-2:] == [
        ev.COMMAND_COMPLETED,
        ev.EXECUTION_FAILED,
    ]


def test_a_start_retried_after_an_id_conflict_seals_its_workload_once(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = text_of(ONE_STEP)
    pb = load.load_text(text)
    orchestrator = Orchestrator(store, secret_key=new_key())
    _, version = orchestrator.register(text, pb)
    real = orchestrator.process
    calls: list[int] = []

    def conflict_once(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise EventIdConflict("taken", event_ids=["1"])
        return real(*args, **kw)

    monkeypatch.setattr(orchestrator, "process", conflict_once)
    xid, _ = orchestrator.start(pb, version, {"password": "hunter2real"}, execution_id=777)
    assert xid == 777 and len(calls) == 2
    blobs = query(store, "SELECT * FROM result_blob", ())
    assert len(blobs) == 1


def test_a_sealed_entry_that_is_not_json_is_unreadable(store: Any) -> None:
    sealer = Sealer(store, "")
    for data in (b"json:\xff\xfe", b"json:{not json"):
        uri = store.put_blob(1, data, 0.0)
        with pytest.raises(WorkloadUnreadable):
            sealer.open(uri)


def test_an_ended_sealed_run_evicted_from_the_cache_is_opened_again(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(orchestrator_module, "ENDED_KEPT", 0)
    orchestrator = Orchestrator(store, secret_key=new_key())
    xid, report = _sealed_run(store, ONE_STEP, orchestrator)
    assert orchestrator.process([report]).finished
    orchestrator.retire(xid)  # ended, and evicted at once
    assert orchestrator.state(xid).workload == {"password": "hunter2real"}
