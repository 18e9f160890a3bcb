"""Teardown through a server (`executor.spec.teardown`): `milepost server` and a
`milepost worker` process on SQLite and PostgreSQL, the saga's side effects counted in a
file, `cleanup` and `notify` tearing down whatever the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance import saga_server
from tests.acceptance.harness import Cluster
from tests.acceptance.saga_server import start
from tests.compensation_saga import DONE, REFUND, RELEASE, effects
from tests.shared import wait_for

pytestmark = pytest.mark.slow

# the saga's cluster fixture, bound by the name its tests ask for (an import of it would be
# shadowed by their parameters)
cluster = saga_server.cluster


def events(cluster: Cluster, xid: str) -> list[dict[str, Any]]:
    return cluster.client.events(xid)


def test_every_end_tears_down_once_in_order_and_a_failure_there_is_shown_not_the_runs(
    cluster: Cluster, tmp_path: Path
) -> None:
    failed = start(cluster, tmp_path, {"fail": ["ship"], "gate": []}, teardown=True)
    status = cluster.wait(failed)
    assert status["status"] == "FAILED" and status["error"]["step"] == "ship"
    assert effects(tmp_path) == [*DONE, RELEASE, REFUND, "cleanup FAILED ship", "notify FAILED"]
    assert status["tearing_down"] is False
    assert [(i["step"], i["status"]) for i in status["teardown"]["items"]] == [
        ("cleanup", "COMPLETED"),
        ("notify", "COMPLETED"),
    ]
    assert events(cluster, failed)[-1]["event_type"] == "execution.failed"

    (tmp_path / "effects").unlink()
    completed = start(cluster, tmp_path, {"fail": ["cleanup"], "gate": []}, teardown=True)
    status = cluster.wait(completed)
    assert status["status"] == "COMPLETED", cluster.diagnostics()
    assert effects(tmp_path) == [*DONE, "ship", "notify COMPLETED"]  # notify still ran
    assert status["steps"]["cleanup"]["status"] == "FAILED"
    described = cluster.client.describe(completed)
    assert "cleanup refused" in described["steps"]["cleanup"]["error"]["message"]
    assert described["teardown"]["items"][0]["status"] == "FAILED"
    headers = {"Authorization": f"Bearer {cluster.admin_token}"}
    graph = httpx.get(f"{cluster.url}/api/executions/{completed}/graph", headers=headers)
    nodes = {n["id"]: n for n in graph.json()["nodes"]}
    assert (nodes["cleanup"]["teardown"], nodes["cleanup"]["status"]) == (True, "FAILED")
    kinds = [f["kind"] for f in cluster.client.diagnosis(completed)["findings"]]
    assert kinds == ["completed", "teardown_failed"]


def test_a_cancelled_run_tears_down_then_ends_cancelled_and_a_cancel_while_tearing_down_stops_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    xid = start(cluster, tmp_path, {"fail": [], "gate": ["ship"]}, teardown=True)
    wait_for(lambda: (tmp_path / "ship.started").exists(), "ship to start", timeout=45)
    cluster.client.cancel(xid)  # the worker stops ship at its next heartbeat: no effect
    status = cluster.wait(xid)
    assert status["status"] == "CANCELLED", cluster.diagnostics()
    assert effects(tmp_path) == [
        *DONE,
        RELEASE,
        REFUND,
        "cleanup CANCELLED None",
        "notify CANCELLED",
    ]

    (tmp_path / "effects").unlink()
    busy = start(cluster, tmp_path, {"fail": [], "gate": ["cleanup"]}, teardown=True)
    wait_for(lambda: (tmp_path / "cleanup.started").exists(), "cleanup to start", timeout=45)
    assert cluster.client.status(busy)["tearing_down"] is True
    cluster.client.cancel(busy)  # heartbeats answer `cancelled: false`: nothing is stopped
    (tmp_path / "cleanup.gate").touch()
    status = cluster.wait(busy)
    assert status["status"] == "COMPLETED", cluster.diagnostics()
    assert effects(tmp_path) == [*DONE, "ship", "cleanup COMPLETED None", "notify COMPLETED"]


def test_a_server_killed_while_tearing_down_resumes_without_running_any_step_twice(
    cluster: Cluster, tmp_path: Path
) -> None:
    xid = start(cluster, tmp_path, {"fail": [], "gate": ["notify"]}, teardown=True)
    wait_for(lambda: (tmp_path / "notify.started").exists(), "notify to start", timeout=45)
    status = cluster.client.status(xid)
    assert status["status"] == "RUNNING" and status["tearing_down"] is True
    assert [i["status"] for i in status["teardown"]["items"]] == ["COMPLETED", "RUNNING"]
    cluster.kill_server()
    cluster.start_server()
    (tmp_path / "notify.gate").touch()
    status = cluster.wait(xid, timeout=60)
    assert status["status"] == "COMPLETED", cluster.diagnostics()
    assert effects(tmp_path) == [*DONE, "ship", "cleanup COMPLETED None", "notify COMPLETED"]
    issued = [
        e
        for e in events(cluster, xid)
        if e["event_type"] == "command.issued" and e["step"] in ("cleanup", "notify")
    ]
    assert len(issued) == 2
