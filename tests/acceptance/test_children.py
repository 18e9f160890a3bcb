"""The `playbook` tool through a server: children are started over the API and linked, by
workers that hold `worker` tokens, as an installation gives them."""

from __future__ import annotations

import pytest

from milepost.client import MilepostClient, ServerRefused
from milepost.conformance.cluster import LocalCluster
from tests.acceptance.harness import PG_ADMIN_URL, pg_available
from tests.shared import IN_CI

pytestmark = pytest.mark.slow

CHILD = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child, path: tests/child}
workload: {x: 1}
workflow:
  - step: start
    tool: {kind: python, input: {x: "{{ workload.x }}"}, code: "result = {'double': x * 2}"}
"""

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
