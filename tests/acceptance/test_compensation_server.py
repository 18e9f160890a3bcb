"""Compensation through a server (DSL 10.5): `milepost server` and a `milepost worker`
process on SQLite and PostgreSQL, the saga's side effects counted in a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from milepost.cli.reads import LocalRuns
from tests.acceptance import saga_server
from tests.acceptance.harness import Cluster
from tests.acceptance.saga_server import start
from tests.compensation_saga import DONE, REFUND, RELEASE, effects
from tests.shared import wait_for

pytestmark = pytest.mark.slow

# the saga's cluster fixture, bound by the name its tests ask for (an import of it would be
# shadowed by their parameters)
cluster = saga_server.cluster


def types(cluster: Cluster, xid: str) -> list[str]:
    return [e["event_type"] for e in cluster.client.events(xid)]


def test_failed_runs_compensate_in_reverse_order_once_and_a_completed_one_never(
    cluster: Cluster, tmp_path: Path
) -> None:
    xid = start(cluster, tmp_path, {"fail": ["ship"], "gate": []})
    status = cluster.wait(xid)
    assert status["status"] == "FAILED" and status["error"]["step"] == "ship"
    assert effects(tmp_path) == [*DONE, RELEASE, REFUND]
    assert status["compensating"] is False
    assert [(i["compensation"], i["status"]) for i in status["compensation"]["items"]] == [
        ("release", "COMPLETED"),
        ("refund", "COMPLETED"),
    ]
    assert types(cluster, xid)[-1] == "execution.failed"
    described = cluster.client.describe(xid)  # the compensations that ran are steps of it
    assert {n: s.get("compensates") for n, s in described["steps"].items()} == {
        "start": None,
        "reserve": None,
        "ship": None,
        "release": ["reserve"],
        "refund": ["start"],
    }
    assert [a["status"] for a in described["steps"]["refund"]["attempts"]] == ["COMPLETED"]
    local = LocalRuns(cluster.db_url)
    try:  # `milepost describe --db` of the same database says the same
        assert local.describe(int(xid))["steps"] == described["steps"]
    finally:
        local.close()

    (tmp_path / "effects").unlink()
    failing = start(cluster, tmp_path, {"fail": ["ship", "release"], "gate": []})
    status = cluster.wait(failing)
    assert status["status"] == "FAILED" and status["error"]["step"] == "ship"
    assert effects(tmp_path) == [*DONE, REFUND]  # the failing release did not stop refund
    items = status["compensation"]["items"]
    assert [(i["compensation"], i["status"]) for i in items] == [
        ("release", "FAILED"),
        ("refund", "COMPLETED"),
    ]

    (tmp_path / "effects").unlink()
    fine = start(cluster, tmp_path, {"fail": [], "gate": []})
    status = cluster.wait(fine)
    assert status["status"] == "COMPLETED" and status.get("compensation") is None
    assert effects(tmp_path) == [*DONE, "ship"]
    assert not any(t.startswith("compensation.") for t in types(cluster, fine))


def test_a_cancelled_run_compensates_on_the_worker_then_ends_cancelled(
    cluster: Cluster, tmp_path: Path
) -> None:
    xid = start(cluster, tmp_path, {"fail": [], "gate": ["ship"]})
    wait_for(lambda: (tmp_path / "ship.started").exists(), "ship to start", timeout=45)
    cluster.client.cancel(xid)  # the worker stops ship at its next heartbeat: no effect
    status = cluster.wait(xid)
    assert status["status"] == "CANCELLED", cluster.diagnostics()
    assert effects(tmp_path) == [*DONE, RELEASE, REFUND]
    assert types(cluster, xid)[-1] == "execution.cancelled"


def test_a_server_killed_while_compensating_resumes_without_running_any_twice(
    cluster: Cluster, tmp_path: Path
) -> None:
    xid = start(cluster, tmp_path, {"fail": ["ship"], "gate": ["refund"]})
    wait_for(lambda: (tmp_path / "refund.started").exists(), "refund to start", timeout=45)
    status = cluster.client.status(xid)
    assert status["status"] == "RUNNING" and status["compensating"] is True
    assert [i["status"] for i in status["compensation"]["items"]] == ["COMPLETED", "RUNNING"]
    cluster.kill_server()
    cluster.start_server()
    (tmp_path / "refund.gate").touch()
    status = cluster.wait(xid, timeout=60)
    assert status["status"] == "FAILED", cluster.diagnostics()
    assert effects(tmp_path) == [*DONE, RELEASE, REFUND]
    issued = [e for e in cluster.client.events(xid) if e["event_type"] == "command.issued"]
    assert len(issued) == 2 + 1 + 1 + 2  # start, two iterations, ship, two compensations
