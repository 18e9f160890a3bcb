"""The embedded engine on a real SQLite file: snapshots, retries, resume, big results."""

from __future__ import annotations

import asyncio
import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.core import state as st
from milepost.credentials import new_key
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.orchestrator import Orchestrator
from milepost.engine.seal import WorkloadUnreadable
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/engine}\n"


def text_of(body: str) -> str:
    return HEADER + textwrap.dedent(body)


async def run(store: SQLiteStore, body: str, workload: dict[str, Any] | None = None,
              **engine_kw: Any) -> st.ExecutionState:  # fmt: skip
    text = text_of(body)
    async with EmbeddedEngine(store, **engine_kw) as engine:
        return await engine.run(load.load_text(text), text, workload, timeout=60)


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = SQLiteStore(tmp_path / "engine.db")
    yield s
    s.close()


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
    partial = st.fold(None, events[:40])
    orchestrator._states[state.execution_id] = partial
    orchestrator._maybe_snapshot(partial)
    assert store.load_snapshot(state.execution_id)[0] == partial.last_seq
    rebuilt = Orchestrator(store).state(state.execution_id)
    assert rebuilt == st.fold(None, events)
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


def test_spec_retry_reruns_a_timed_out_attempt_with_a_new_idempotency_key(store: Any,
                                                                         tmp_path: Path) -> None:  # fmt: skip
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
            xid, outcome = engine.orchestrator.start(pb, 1, {})
            engine._handle(outcome)
            attempts = tmp_path / "attempts"
            while not attempts.exists():  # `wait` is running and will not report
                await asyncio.sleep(0.01)
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
    state = asyncio.run(run(store, """
    workflow:
      - step: start
        tool: {kind: python, code: "result = {'blob': 'x' * 600000}"}
        next: size
      - step: size
        tool: {kind: python, input: {b: "{{ start.blob }}"}, code: "result = len(b)"}
    """))
    assert state.status == st.COMPLETED and state.results["size"] == 600000
    assert store._query("SELECT count(*) FROM result_blob", ())[0][0] >= 1
    biggest = store._query("SELECT max(length(result)) FROM event", ())[0][0]
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


# --------------------------------------------------------------------------- secrets

DB_CREDENTIAL = {"type": "postgres", "host": "db.internal", "user": "etl",
                 "password": "pa55-w0rd-xyz", "database": "warehouse"}  # fmt: skip
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
    assert "pa55-w0rd-xyz" not in str(store._query("SELECT * FROM event", ()))


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
    assert "hunter2-real" not in str(store._query("SELECT * FROM event", ()))
    sealed = store.get_blob(started.payload["sealed_workload"])
    assert (b"hunter2-real" in sealed) is (key is None)  # encrypted when a key is set
    # a new engine (a resume) opens the sealed workload again
    assert Orchestrator(store).state(state.execution_id).workload == workload


def test_a_snapshot_keeps_the_masked_workload(store: Any) -> None:
    orchestrator = Orchestrator(store, snapshot_every=1, secret_key=new_key())
    pb = load.load_text(text_of(READS_PASSWORD))
    orchestrator.register(text_of(READS_PASSWORD), pb)
    xid, _ = orchestrator.start(pb, 1, {"password": "hunter2-real"})
    assert orchestrator.state(xid).workload == {"password": "hunter2-real"}
    assert b"hunter2-real" not in store.load_snapshot(xid)[1]
    reopened = Orchestrator(store, secret_key="")  # no key: the sealed entry is unreadable
    with pytest.raises(WorkloadUnreadable) as info:
        reopened.state(xid)
    assert info.value.code == "workload_unreadable"


def test_a_workload_without_secrets_is_not_sealed(store: Any) -> None:
    state = asyncio.run(run(store, READS_PASSWORD, {"password": "", "user": "ada"}))
    assert "sealed_workload" not in _started(store, state.execution_id).payload
