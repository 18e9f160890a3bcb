"""Cancellation through `milepost server` and real `milepost worker` processes (issue 11,
item 2): the worker learns the cancel on its next heartbeat and kills the python tool's
process; a parent's child is cancelled with it; a worker that ignores the cancel (stopped
with SIGSTOP) is abandoned by the engine when the grace ends."""

from __future__ import annotations

import os
import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.store.factory import open_store
from tests.acceptance.harness import Cluster, database
from tests.holding_step import hold_tool, started
from tests.shared import require_nats, wait_for

pytestmark = pytest.mark.slow

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\n"


def playbook(path: str, body: str, grace: str = "20s") -> str:
    meta = f"metadata: {{name: {path.rsplit('/', 1)[-1]}, path: {path}}}\n"
    return (
        HEADER + meta + f"executor: {{spec: {{cancel_grace: {grace}}}}}\n" + textwrap.dedent(body)
    )


ONE = playbook(
    "acceptance/cancel_one",
    "workflow:\n  - step: hold\n"
    + hold_tool(4)
    + "    next: after\n  - step: after\n    tool: {kind: noop}\n",
)
LOOP = playbook(
    "acceptance/cancel_loop",
    """\
workflow:
  - step: hold
    loop: {in: "{{ [1, 2, 3, 4] }}", iterator: n, spec: {mode: parallel, max_in_flight: 4}}
"""
    + hold_tool(4, ', n: "{{ n }}"'),
)
CHILD = playbook("acceptance/cancel_child", "workflow:\n  - step: hold\n" + hold_tool(4))
PARENT = playbook(
    "acceptance/cancel_parent",
    """\
workflow:
  - step: call
    tool: {kind: playbook, path: acceptance/cancel_child, input: {out: "{{ workload.out }}"}}
""",
)
IGNORED = playbook(
    "acceptance/cancel_ignored", "workflow:\n  - step: hold\n" + hold_tool(4), grace="3s"
)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database(request.param, tmp_path) as url:
        yield url


def start(db_url: str, tmp: Path, *, lease: float = 3.0, concurrency: int = 4) -> Cluster:
    """A server and one worker; a short lease makes the heartbeats come every second."""
    cluster = Cluster(db_url, tmp, lease_seconds=lease)
    cluster.start_server()
    cluster.start_worker(concurrency=concurrency, python_workers=concurrency)
    return cluster


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def events(db_url: str, xid: str) -> list[ev.Event]:
    store = open_store(db_url)
    try:
        return store.load(int(xid))
    finally:
        store.close()


def failures(log: list[ev.Event]) -> list[dict[str, Any]]:
    return [
        e.payload["error"]
        for e in log
        if e.event_type == ev.COMMAND_FAILED and not e.meta.get("stale")
    ]


STOPPED = {
    "kind": "cancelled",
    "retryable": False,
    "message": "execution cancelled: the attempt was stopped",
}


def test_cancel_during_a_running_python_step_kills_its_process(db_url: str, tmp_path: Path) -> None:
    cluster = start(db_url, tmp_path)
    try:
        out = tmp_path / "pids"
        xid = cluster.run(ONE, {"out": str(out)})
        [pid] = started(out)
        cluster.client.cancel(xid)
        status = cluster.wait(xid, timeout=20)
        assert status["status"] == "CANCELLED"
        assert status["steps"]["hold"]["status"] == "CANCELLED", "stopped, not failed"
        # well within the 20 s grace: the worker stopped it, the engine did not abandon it
        wait_for(lambda: gone(pid), f"python process {pid} to be gone", timeout=10)
        log = events(db_url, xid)
        [request] = [e for e in log if e.event_type == ev.EXECUTION_CANCEL_REQUESTED]
        assert request.payload == {"actor": "token:acc-admin"}
        assert failures(log) == [STOPPED]
        assert "after" not in {e.step for e in log}
    finally:
        cluster.close()


def test_cancel_during_a_parallel_loop_stops_every_iteration(tmp_path: Path) -> None:
    with database("sqlite", tmp_path) as db_url:
        cluster = start(db_url, tmp_path, concurrency=2)
        try:
            out = tmp_path / "pids"
            xid = cluster.run(LOOP, {"out": str(out)})
            running = started(out, 2)  # two slots: two iterations run, two wait in the queue
            cluster.client.cancel(xid)
            assert cluster.wait(xid, timeout=20)["status"] == "CANCELLED"
            for pid in running:
                wait_for(lambda pid=pid: gone(pid), f"python process {pid} to be gone", timeout=10)
            assert len(out.read_text().split()) == 2  # the queued ones never ran
            messages = sorted(f["message"] for f in failures(events(db_url, xid)))
            assert (
                messages
                == ["execution cancelled before the command ran"] * 2 + [STOPPED["message"]] * 2
            )
        finally:
            cluster.close()


def test_cancel_of_a_parent_cancels_its_running_child_and_stops_the_childs_tool(
    tmp_path: Path,
) -> None:
    with database("sqlite", tmp_path) as db_url:
        cluster = start(db_url, tmp_path)
        try:
            cluster.client.register(CHILD)
            out = tmp_path / "pids"
            xid = cluster.run(PARENT, {"out": str(out)})
            [pid] = started(out)
            [child] = [
                e["execution_id"]
                for e in cluster.client.executions(limit=10)
                if e.get("parent_execution_id") == xid
            ]
            cluster.client.cancel(xid)
            assert cluster.wait(xid, timeout=20)["status"] == "CANCELLED"
            assert cluster.wait(child, timeout=20)["status"] == "CANCELLED"
            wait_for(lambda: gone(pid), f"the child's python process {pid} to be gone", timeout=10)
            [request] = [
                e for e in events(db_url, child) if e.event_type == ev.EXECUTION_CANCEL_REQUESTED
            ]
            assert request.payload["actor"] == "token:acc-admin"
            assert request.payload["cause"] == f"parent {xid} cancelled"
            assert failures(events(db_url, child)) == [STOPPED]
        finally:
            cluster.close()


def test_a_worker_that_ignores_the_cancel_is_abandoned_when_the_grace_ends(tmp_path: Path) -> None:
    with database("sqlite", tmp_path) as db_url:
        # a lease far longer than the grace: the abandonment, not a lost lease, ends it
        cluster = start(db_url, tmp_path, lease=60.0)
        try:
            out = tmp_path / "pids"
            xid = cluster.run(IGNORED, {"out": str(out)})
            [pid] = started(out)
            worker = cluster.workers[0]
            worker.signal(signal.SIGSTOP, group=True)  # it hears nothing, does nothing
            cluster.client.cancel(xid)
            assert cluster.wait(xid, timeout=20)["status"] == "CANCELLED"
            [abandoned] = failures(events(db_url, xid))
            assert abandoned["message"] == (
                "execution cancelled: attempt abandoned after the cancel grace (3s)"
            )
            before = len(events(db_url, xid))
            worker.signal(signal.SIGCONT, group=True)
            # its next heartbeat is refused (the command was settled): it drops the attempt
            wait_for(lambda: gone(pid), f"python process {pid} to be gone", timeout=40)
            assert len(events(db_url, xid)) == before  # nothing it did reached the log
            assert cluster.client.status(xid)["status"] == "CANCELLED"
        finally:
            cluster.close()


def test_with_nats_a_cancel_reaches_the_running_attempt_without_waiting_for_its_heartbeat(
    tmp_path: Path,
) -> None:
    """A 90 s lease: the next heartbeat is 30 s away. The server announces the cancel on
    NATS, the worker heartbeats at once, learns it and stops the attempt."""
    require_nats()
    with database("sqlite", tmp_path) as db_url:
        cluster = start(db_url, tmp_path, lease=90.0)
        try:
            out = tmp_path / "pids"
            xid = cluster.run(ONE, {"out": str(out)})
            [pid] = started(out)
            cluster.client.cancel(xid)
            status = cluster.wait(xid, timeout=15)
            assert status["status"] == "CANCELLED", cluster.diagnostics()
            wait_for(lambda: gone(pid), f"python process {pid} to be gone", timeout=10)
            assert failures(events(db_url, xid)) == [STOPPED], "stopped by the worker"
        finally:
            cluster.close()
