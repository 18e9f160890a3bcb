"""The `playbook` tool through a server: children are started over the API and linked, by
workers that hold `worker` tokens, as an installation gives them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from milepost.client import MilepostClient, ServerRefused
from milepost.conformance.cluster import LocalCluster
from tests.acceptance.harness import PG_ADMIN_URL, Cluster, database, pg_available
from tests.acceptance.test_cluster import playbook
from tests.children_world import (
    CALLS_HOLDING,
    CHILD,
    HOLDING_CHILD,
    SLOW_STEP,
    STEADY_CHILD,
    WAITS_ON_STEADY,
)
from tests.holding_step import started
from tests.shared import IN_CI, process_gone, wait_for

pytestmark = pytest.mark.slow

PARENT = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: parent, path: tests/parent}
workflow:
  - step: start
    loop: {in: "{{ [1, 2, 3] }}", iterator: n, spec: {mode: parallel, max_in_flight: 3}}
    tool: {kind: playbook, path: tests/child, input: {x: "{{ n }}"}, return_step: start}
"""


def test_playbook_tool_starts_children_through_the_server() -> None:
    if not pg_available():
        if IN_CI:
            pytest.fail("PostgreSQL must be reachable under CI")
        pytest.skip("PostgreSQL is not reachable")
    with (
        LocalCluster(PG_ADMIN_URL, workers=1) as cluster,
        MilepostClient(cluster.url, cluster.token) as client,
    ):
        with MilepostClient(cluster.url, cluster.worker_token) as worker:
            with pytest.raises(ServerRefused) as refused:  # the workers' token may not execute
                worker.execute("tests/child", {})
            assert refused.value.status == 403
        client.register(CHILD)
        client.register(PARENT)
        xid = client.execute("tests/parent", {})
        client.wait(xid, timeout=60)
        status = client.status(xid)
        assert status["status"] == "COMPLETED", status.get("error")
        assert status["steps"]["start"]["result"] == [{"double": 2}, {"double": 4}, {"double": 6}]
        children = [
            e for e in client.executions(limit=100) if e.get("parent_execution_id") == str(xid)
        ]
        assert len(children) == 3 and all(c["status"] == "COMPLETED" for c in children)


# -- issue 33, items 1 to 3: the same as tests/integration/test_children_embedded.py ----------

# its step goes to a pool no worker serves: queued until a cancel settles it at once
QUEUED_CHILD = playbook(
    "acceptance/children/queued",
    "workflow:\n  - step: wait\n    spec: {pool: nobody}\n    tool: {kind: noop}\n",
)
CALLS_QUEUED = playbook(
    "acceptance/children/calls_queued",
    """\
    workflow:
      - step: call
        tool: {kind: playbook, path: acceptance/children/queued}
    """,
)


@pytest.fixture(params=["sqlite", "postgres"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    # a short lease: heartbeats every second, so a worker learns a cancel within one
    with database(request.param, tmp_path) as url, Cluster(url, tmp_path, lease_seconds=3) as made:
        yield made


def start(cluster: Cluster, *registered: str) -> None:
    """The server and a worker, up before the first run (a stall window of 2 s is shorter
    than a worker's start on a busy machine)."""
    cluster.start_server()
    cluster.start_worker(concurrency=4, python_workers=4)
    for text in registered:
        cluster.client.register(text)
    cluster.workers_live()


def child_of(cluster: Cluster, parent: str) -> str:
    def found() -> str | None:
        rows = cluster.client.executions(limit=100)
        ids = [r["execution_id"] for r in rows if r.get("parent_execution_id") == parent]
        return ids[0] if ids else None

    return wait_for(found, f"a child of {parent}", timeout=30)


def test_a_parent_waiting_on_a_child_that_makes_progress_is_not_stalled(cluster: Cluster) -> None:
    """Issue 33 item 1: the parent's stall window is 3 s and it writes nothing for 4.5 s
    while its child works, an event every 1.5 s: nothing stalled, both complete."""
    start(cluster, STEADY_CHILD)
    xid = cluster.run(WAITS_ON_STEADY)
    status = cluster.wait(xid, timeout=60)
    assert status["status"] == "COMPLETED", status.get("error")
    assert status["steps"]["call"]["result"] == [1, 2, 3]
    assert cluster.client.status(child_of(cluster, xid))["status"] == "COMPLETED"


def test_a_heartbeating_step_longer_than_stall_after_is_not_stalled(cluster: Cluster) -> None:
    """Issue 33 item 3: a 5 s step with no `spec.timeout` and a 2 s stall window."""
    start(cluster)
    xid = cluster.run(SLOW_STEP)
    status = cluster.wait(xid, timeout=60)
    assert status["status"] == "COMPLETED", status.get("error")
    assert status["steps"]["think"]["result"] == "thought"


def test_a_parent_failed_by_the_engine_s_timeout_cancels_its_running_child(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Issue 33 item 1: the parent's `playbook` attempt is failed by the engine's
    default_timeout while its child holds a python step: the child is cancelled (its
    python process killed), it never completes after its parent failed."""
    cluster.env["MILEPOST_DEFAULT_TIMEOUT"] = "3"
    start(cluster, HOLDING_CHILD)
    out = tmp_path / "pids"
    xid = cluster.run(CALLS_HOLDING, {"out": str(out)})
    [pid] = started(out, what="the child's python step to start")
    parent = cluster.wait(xid, timeout=30)
    assert parent["status"] == "FAILED" and parent["error"]["kind"] == "timeout", parent
    child = child_of(cluster, xid)
    assert cluster.wait(child, timeout=30)["status"] == "CANCELLED"
    wait_for(lambda: process_gone(pid), f"the child's python process {pid} to be gone", timeout=10)
    [request] = [
        e["result"]["context"]
        for e in cluster.client.events(child)
        if e["event_type"] == "execution.cancel_requested"
    ]
    assert request == {"cause": f"parent {xid} failed"}


@pytest.fixture
def slow_to_hear(tmp_path: Path) -> Iterator[Cluster]:
    """A worker that hears of a cancel only at its next heartbeat, 10 s away (a 30 s
    lease, no NATS to announce it)."""
    with (
        database("sqlite", tmp_path) as url,
        Cluster(url, tmp_path, lease_seconds=30, use_nats=False) as made,
    ):
        yield made


def test_a_cancelled_parent_s_playbook_step_exits_cancelled(slow_to_hear: Cluster) -> None:
    """Issue 33 item 2: the parent's cancel cancels its child, which ends at once (its one
    command was queued); the parent's `playbook` tool hears of the child's end before its
    worker hears of the cancel. The step was stopped by its own run's cancel: CANCELLED,
    in its status and on the graph, as embedded."""
    cluster = slow_to_hear
    start(cluster, QUEUED_CHILD)
    xid = cluster.run(CALLS_QUEUED)
    child = child_of(cluster, xid)
    cluster.client.cancel(xid)
    parent = cluster.wait(xid, timeout=30)
    assert parent["status"] == "CANCELLED"
    assert cluster.client.status(child)["status"] == "CANCELLED"
    assert parent["steps"]["call"]["status"] == "CANCELLED", parent["steps"]["call"]
    graph = httpx.get(
        f"{cluster.url}/api/executions/{xid}/graph",
        headers={"Authorization": f"Bearer {cluster.admin_token}"},
        timeout=10,
    ).json()
    assert {n["id"]: n["status"] for n in graph["nodes"]}["call"] == "CANCELLED"


def test_a_playbook_step_whose_child_alone_was_cancelled_fails(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Issue 33 item 2, the other side: the parent was not cancelled, its child was
    (DSL 3.5: a CANCELLED child is a task error of kind `playbook`)."""
    start(cluster, HOLDING_CHILD)
    out = tmp_path / "pids"
    xid = cluster.run(CALLS_HOLDING, {"out": str(out)})
    started(out, what="the child's python step to start")
    cluster.client.cancel(child_of(cluster, xid))
    parent = cluster.wait(xid, timeout=30)
    assert parent["status"] == "FAILED"
    assert parent["steps"]["call"]["status"] == "FAILED"
    assert parent["error"]["kind"] == "playbook" and "CANCELLED" in parent["error"]["message"]
