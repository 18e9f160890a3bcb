"""Cancellation in the embedded mode (issue 11, item 2), the same as behind a server: the
running attempts are stopped (the python tool's process killed), a parallel loop stops,
a parent's running child is cancelled with it, a tool that ignores the cancel is
abandoned when `cancel_grace` ends, and `milepost cancel` of a run nothing drives any
more finishes it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine.drivers import holder_alive
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from milepost.tools import base
from tests.holding_step import hold_tool, pids
from tests.shared import process_gone, wait_for, wait_for_async

STOPPED = "execution cancelled: the attempt was stopped"
NEVER_RAN = "execution cancelled before the command ran"


def text(path: str, steps: str, grace: str = "20s") -> str:
    return (
        f"apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {{name: t, path: {path}}}\n"
        f"executor: {{spec: {{cancel_grace: {grace}}}}}\nworkflow:\n" + textwrap.dedent(steps)
    )


ONE = text(
    "tests/cancel_one",
    "  - step: hold\n" + hold_tool() + "    next: after\n  - step: after\n    tool: {kind: noop}\n",
)
LOOP = text(
    "tests/cancel_loop",
    """\
  - step: hold
    loop: {in: "{{ [1, 2, 3, 4] }}", iterator: n, spec: {mode: parallel, max_in_flight: 4}}
"""
    + hold_tool(extra=', n: "{{ n }}"'),
)
CHILD = text("tests/cancel_child", "  - step: hold\n" + hold_tool())
PARENT = text(
    "tests/cancel_parent",
    """\
  - step: call
    tool: {kind: playbook, path: tests/cancel_child, input: {out: "{{ workload.out }}"}}
""",
)


def failures(store: Any, xid: int) -> list[str]:
    return sorted(
        e.payload["error"]["message"]
        for e in store.load(xid)
        if e.event_type == ev.COMMAND_FAILED and not e.meta.get("stale")
    )


def requests(store: Any, xid: int) -> list[dict[str, Any]]:
    return [e.payload for e in store.load(xid) if e.event_type == ev.EXECUTION_CANCEL_REQUESTED]


def test_cancel_during_a_running_python_step_kills_its_process(store: Any, tmp_path: Path) -> None:
    out = tmp_path / "pids"

    async def go() -> tuple[st.ExecutionState, int]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            xid = engine.start(load.load_text(ONE), ONE, {"out": str(out)})
            [pid] = await wait_for_async(lambda: pids(out), "the python step to start")
            engine.cancel(xid, "user:alice")
            return await engine.wait(xid, timeout=10), pid

    state, pid = asyncio.run(go())
    assert state.status == st.CANCELLED and "after" not in state.step_status
    assert state.step_status["hold"] == st.CANCELLED, "stopped by the cancel, not failed"
    assert process_gone(pid)  # killed, well before the 20 s grace
    assert requests(store, state.execution_id) == [{"actor": "user:alice"}]
    assert failures(store, state.execution_id) == [STOPPED]


def test_a_cancel_from_another_process_stops_a_parallel_loop(store: Any, tmp_path: Path) -> None:
    out = tmp_path / "pids"

    async def go() -> tuple[st.ExecutionState, list[int]]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            xid = engine.start(load.load_text(LOOP), LOOP, {"out": str(out)})
            running = await wait_for_async(lambda: pids(out, 2), "two iterations to start")
            # what `milepost cancel` writes: the request only, straight to the log; the
            # engine's poller notices it
            other = SQLiteStore(store.path)
            try:
                other.append(
                    [
                        ev.new_event(
                            10**15 + 1,
                            xid,
                            ev.EXECUTION_CANCEL_REQUESTED,
                            engine.orchestrator.clock(),
                            payload={"actor": "user:bob"},
                        )
                    ]
                )
            finally:
                other.close()
            return await engine.wait(xid, timeout=10), running

    state, running = asyncio.run(go())
    assert state.status == st.CANCELLED
    assert all(process_gone(pid) for pid in running)
    assert len(out.read_text().split()) == 2  # the two waiting iterations never ran
    assert failures(store, state.execution_id) == [NEVER_RAN] * 2 + [STOPPED] * 2


def test_cancel_of_a_parent_cancels_its_running_child(store: Any, tmp_path: Path) -> None:
    out = tmp_path / "pids"

    async def go() -> tuple[st.ExecutionState, st.ExecutionState, int]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            engine.service.register(CHILD, load.load_text(CHILD))
            xid = engine.start(load.load_text(PARENT), PARENT, {"out": str(out)})
            [pid] = await wait_for_async(lambda: pids(out), "the child's step to start")
            [child] = [
                r.execution_id for r in store.list_executions() if r.parent_execution_id == xid
            ]
            engine.cancel(xid, "user:alice")
            parent = await engine.wait(xid, timeout=10)
            return parent, await engine.wait(child, timeout=10), pid

    parent, child, pid = asyncio.run(go())
    assert parent.status == st.CANCELLED and child.status == st.CANCELLED
    assert process_gone(pid)
    assert requests(store, child.execution_id) == [
        {"actor": "user:alice", "cause": f"parent {parent.execution_id} cancelled"}
    ]
    assert failures(store, child.execution_id) == [STOPPED]


class Stubborn:
    """A tool that ignores a cancel: it goes on until released, then reports."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.ignored = 0

    async def run(self, call: base.ToolCall) -> base.ToolResult:
        self.started.set()
        while not self.release.is_set():
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.ignored += 1  # swallowed: this tool will not stop
        return base.ToolResult(data={"late": True})

    async def aclose(self) -> None:
        self.release.set()


IGNORED = text("tests/cancel_ignored", "  - step: hold\n    tool: {kind: noop}\n", grace="1s")


def test_a_tool_that_ignores_the_cancel_is_abandoned_when_the_grace_ends(store: Any) -> None:
    tool = Stubborn()

    async def go() -> tuple[st.ExecutionState, int]:
        async with EmbeddedEngine(store, concurrency=2, tools=tool) as engine:
            xid = engine.start(load.load_text(IGNORED), IGNORED)
            await asyncio.wait_for(tool.started.wait(), 10)
            engine.cancel(xid)
            try:
                state = await engine.wait(xid, timeout=10)  # the grace's timer, not the tool
            finally:
                tool.release.set()  # (else a failure here would hang the engine's exit)
            logged = len(store.load(xid))
            # it reports at last, too late. The reporter takes a report off its queue and
            # hands it over in one step: an empty queue and no attempt running mean it did
            await wait_for_async(
                lambda: engine.workers.busy == 0 and engine._reports.empty(), "the late report"
            )
            return state, logged

    state, logged = asyncio.run(go())
    assert state.status == st.CANCELLED and tool.ignored >= 1
    assert failures(store, state.execution_id) == [
        "execution cancelled: attempt abandoned after the cancel grace (1s)"
    ]
    assert len(store.load(state.execution_id)) == logged  # the late report changed nothing
    assert store.get_execution(state.execution_id).status == st.CANCELLED


DRIVER = """
import asyncio, sys
from milepost.engine.drivers import holder_alive
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore

async def main():
    store = SQLiteStore(sys.argv[1])
    text = open(sys.argv[2]).read()
    async with EmbeddedEngine(store) as engine:
        xid = engine.start(load.load_text(text), text, {"out": sys.argv[3]})
        print(xid, flush=True)
        await engine.wait(xid)

asyncio.run(main())
"""


def test_milepost_cancel_of_a_run_whose_driver_died_finishes_it(tmp_path: Path) -> None:
    db, out = tmp_path / "m.db", tmp_path / "pids"
    playbook = tmp_path / "one.yaml"
    playbook.write_text(ONE)
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(db), str(playbook), str(out)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert driver.stdout is not None
        xid = driver.stdout.readline().strip()
        wait_for(lambda: pids(out), "the python step to start", timeout=30)
        _kill_group(driver)  # the driver and its python worker die: nothing drives it
    finally:
        _kill_group(driver)
    milepost = str(Path(sys.executable).with_name("milepost"))
    env = {**os.environ, "MILEPOST_USER": "carol"}
    done = subprocess.run(
        [milepost, "cancel", xid, "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "CANCELLED" in done.stdout
    store = SQLiteStore(db)
    try:
        log = store.load(int(xid))
        assert log[-1].event_type == ev.EXECUTION_CANCELLED
        assert requests(store, int(xid)) == [{"actor": "user:carol"}]
        [abandoned] = failures(store, int(xid))
        assert abandoned.startswith("execution cancelled: attempt abandoned")
        assert store.open_commands(int(xid)) == []
        assert store.get_driver(int(xid)).expires_at <= time.time()  # given back
    finally:
        store.close()
    again = subprocess.run(
        [milepost, "cancel", xid, "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert again.returncode == 2 and "already CANCELLED" in again.stderr


SAGA = text(
    "tests/cancel_saga",
    """\
  - step: start
    tool: {kind: noop}
    spec: {compensation: undo}
    next: hold
  - step: hold
    tool:
      kind: python
      input: {dir: "{{ workload.dir }}"}
      code: |
        import os, time
        open(os.path.join(dir, "holding"), "w").write("x")
        while not os.path.exists(os.path.join(dir, "gate")):
            time.sleep(0.05)
        result = 1
  - step: undo
    tool:
      kind: python
      input: {dir: "{{ workload.dir }}"}
      code: |
        import os, time
        with open(os.path.join(dir, "undone"), "a") as f:
            f.write("undo\\n")
        while not os.path.exists(os.path.join(dir, "undo_gate")):
            time.sleep(0.05)
        result = "undone"
""",
)
"""`start` is undone by `undo` (which writes `undone`, then waits for `undo_gate`); `hold`
waits for `gate`, which no test opens: the run is killed while it waits."""
MILEPOST = str(Path(sys.executable).with_name("milepost"))
CAROL = {**os.environ, "MILEPOST_USER": "carol"}


def orphaned_saga(tmp_path: Path) -> tuple[Path, str]:
    """A `milepost run` of SAGA, SIGKILLed (with its python worker) once `hold` runs: its
    database and the run's id, which nothing drives any more."""
    db, playbook = tmp_path / "saga.db", tmp_path / "saga.yaml"
    playbook.write_text(SAGA)
    run = subprocess.Popen(
        [MILEPOST, "run", str(playbook), "--db", str(db), "--set", f"dir={tmp_path}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert run.stdout is not None
        started = run.stdout.readline()  # off a terminal: `execution N started`
        assert started.endswith(" started\n"), started
        wait_for(lambda: (tmp_path / "holding").exists(), "the second step to run", timeout=30)
        _kill_group(run)
    finally:
        _kill_group(run)
    return db, started.split()[1]


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL a process started in its own session and its children; close its pipe."""
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
        proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()


def types(db: Path, xid: str) -> list[str]:
    store = SQLiteStore(db)
    try:
        return [e.event_type for e in store.load(int(xid))]
    finally:
        store.close()


def test_milepost_cancel_of_a_run_whose_driver_died_runs_its_compensation_to_cancelled(
    tmp_path: Path,
) -> None:
    db, xid = orphaned_saga(tmp_path)
    (tmp_path / "undo_gate").touch()  # the compensation may end at once
    status = subprocess.run(
        [MILEPOST, "status", xid, "--db", str(db)], capture_output=True, text=True, timeout=60
    )
    assert status.returncode == 0, status.stderr
    # nothing drives it: a resume moves it, a worker would not
    assert f"milepost resume {xid} --db {db}" in status.stdout
    assert "milepost worker" not in status.stdout
    done = subprocess.run(
        [MILEPOST, "cancel", xid, "--db", str(db)],
        capture_output=True,
        text=True,
        env=CAROL,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"execution {xid} CANCELLED" in done.stdout
    assert (tmp_path / "undone").read_text() == "undo\n"  # once
    store = SQLiteStore(db)
    try:
        log = store.load(int(xid))
        assert store.get_execution(int(xid)).status == st.CANCELLED
        assert requests(store, int(xid)) == [{"actor": "user:carol"}]
        assert store.open_commands(int(xid)) == []
        # the cancel drove it (an ended run keeps its lease until it expires) and exited
        assert holder_alive(store.get_driver(int(xid)).holder) is False
    finally:
        store.close()
    ends = [
        e.event_type
        for e in log
        if e.event_type
        in (
            ev.EXECUTION_CANCEL_REQUESTED,
            ev.COMPENSATION_STARTED,
            ev.COMPENSATION_COMPLETED,
            ev.EXECUTION_CANCELLED,
        )
    ]
    assert ends == [
        ev.EXECUTION_CANCEL_REQUESTED,
        ev.COMPENSATION_STARTED,
        ev.COMPENSATION_COMPLETED,
        ev.EXECUTION_CANCELLED,
    ]
    assert log[-1].event_type == ev.EXECUTION_CANCELLED


def test_a_ctrl_c_of_that_cancel_leaves_the_run_to_resume(tmp_path: Path) -> None:
    db, xid = orphaned_saga(tmp_path)
    cancel = subprocess.Popen(
        [MILEPOST, "cancel", xid, "--db", str(db)],
        env=CAROL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: (tmp_path / "undone").exists(), "the compensation to run", timeout=60)
        cancel.send_signal(signal.SIGINT)
        stdout, stderr = cancel.communicate(timeout=60)
    finally:
        if cancel.poll() is None:
            os.killpg(cancel.pid, 9)
            cancel.communicate(timeout=10)
    assert cancel.returncode == 130, stdout + stderr
    assert "its cancel stays requested" in stderr
    assert f"milepost resume {xid} --db {db}" in stderr
    assert ev.EXECUTION_CANCELLED not in types(db, xid)
    (tmp_path / "undo_gate").touch()
    resumed = subprocess.run(
        [MILEPOST, "resume", xid, "--db", str(db)], capture_output=True, text=True, timeout=120
    )
    assert "CANCELLED" in resumed.stdout, resumed.stdout + resumed.stderr
    logged = types(db, xid)
    assert logged.count(ev.COMPENSATION_COMPLETED) == 1
    assert logged[-1] == ev.EXECUTION_CANCELLED


SHELL = text(
    "tests/cancel_shell",
    """\
  - step: hold
    tool: {kind: shell, command: "echo $$ >> {{ workload.out }}; sleep 60; echo done"}
""",
)


def test_cancel_during_a_shell_step_kills_its_process_group(store: Any, tmp_path: Path) -> None:
    out = tmp_path / "pids"

    async def go() -> tuple[st.ExecutionState, int]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            xid = engine.start(load.load_text(SHELL), SHELL, {"out": str(out)})
            [pid] = await wait_for_async(lambda: pids(out), "the shell step to start")
            engine.cancel(xid)
            return await engine.wait(xid, timeout=10), pid

    state, pid = asyncio.run(go())
    assert state.status == st.CANCELLED and process_gone(pid)
    assert failures(store, state.execution_id) == [STOPPED]


HTTP = text(
    "tests/cancel_http",
    """\
  - step: hold
    tool: {kind: http, method: GET, url: "{{ workload.url }}", timeout: 60}
""",
)


def test_cancel_during_an_http_step_aborts_the_request(store: Any) -> None:
    async def go() -> tuple[st.ExecutionState, list[str]]:
        seen: list[str] = []

        async def never_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append("request")
            await reader.read()  # until the client closes its side: the abort
            seen.append("closed")
            writer.close()

        server = await asyncio.start_server(never_answers, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with EmbeddedEngine(store, concurrency=2) as engine:
                xid = engine.start(load.load_text(HTTP), HTTP, {"url": f"http://127.0.0.1:{port}/"})
                await wait_for_async(lambda: seen, "the request to arrive")
                engine.cancel(xid)
                state = await engine.wait(xid, timeout=10)
                await wait_for_async(lambda: "closed" in seen, "the connection to be closed")
                return state, seen
        finally:
            server.close()

    state, seen = asyncio.run(go())
    assert state.status == st.CANCELLED and seen == ["request", "closed"]
    assert failures(store, state.execution_id) == [STOPPED]
