"""The workers registry on a cluster (`milepost server` + worker processes), SQLite and
PostgreSQL: a worker is listed as it starts (`GET /api/workers`, `milepost workers
--server`) with the command it runs; SIGKILLed, it is marked lost (the server says so
once) while its command recovers through its lease on another worker; SIGTERMed, it leaves
the registry. A worker whose token the server refuses exits 2 naming MILEPOST_TOKEN
instead of retrying."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from milepost.client import MilepostClient
from tests.acceptance.harness import MILEPOST, Cluster, database, tail
from tests.acceptance.test_cluster import HELD, lines
from tests.shared import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgres"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    # a 2 s lease: a worker is lost 2 s after its last check-in, as its claims are
    with database(request.param, tmp_path) as url, Cluster(url, tmp_path, lease_seconds=2) as made:
        yield made


def listed(cluster: Cluster, **query: str) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in cluster.client.workers(**query)["items"]}


def cli_workers(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "MILEPOST_TOKEN": cluster.admin_token, "COLUMNS": "200"}
    done = subprocess.run(
        [MILEPOST, "workers", "--server", cluster.url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_a_killed_worker_is_marked_lost_while_its_command_recovers(
    cluster: Cluster, tmp_path: Path
) -> None:
    out, block = tmp_path / "side.txt", tmp_path / "block"
    block.touch()
    cluster.start_server()
    first = cluster.start_worker()
    wait_for(
        lambda: "worker-1" in listed(cluster, status="live"),
        f"worker-1 to check in ({tail(first.log)})",
        timeout=30,
    )
    xid = cluster.run(HELD, {"out": str(out), "block": str(block)})
    wait_for(lambda: lines(out), "the first attempt to start", timeout=30)
    shown = listed(cluster)["worker-1"]
    assert shown["status"] == "live" and shown["pools"] == ["default"]
    assert shown["kind"] == "worker" and shown["pid"] == first.pid
    assert shown["host"] and shown["version"]
    assert [(r["execution_id"], r["step"]) for r in shown["running"]] == [(xid, "start")]
    table = " ".join(cli_workers(cluster).stdout.split())
    assert "worker-1" in table and "live" in table and "1 (start)" in table
    as_json = json.loads(cli_workers(cluster, "--json").stdout)
    assert [w["name"] for w in as_json] == ["worker-1"]

    first.kill9()
    lost = wait_for(
        lambda: listed(cluster, status="lost").get("worker-1"),
        "the killed worker to be marked lost",
        timeout=30,
    )
    assert lost["pid"] == first.pid
    # the status is decided as it is read; the reconciler's next tick says it in its log
    wait_for(
        lambda: server_says(cluster, "worker worker-1 lost"),
        "the server to log the loss",
        timeout=30,
    )
    block.unlink()
    cluster.start_worker()
    status = cluster.wait(xid)
    assert status["status"] == "COMPLETED", cluster.diagnostics()
    types = [e["event_type"] for e in cluster.client.events(xid)]
    assert types.count("command.lease_expired") == 1  # recovered through its lease
    final = listed(cluster)
    assert final["worker-1"]["status"] == "lost" and final["worker-1"]["running"] == []
    assert final["worker-2"]["status"] == "live"
    assert list(listed(cluster, status="live")) == ["worker-2"]
    assert server_says(cluster, "worker worker-1 lost") == 1  # said once
    assert cluster.workers[1].stop() == 0  # SIGTERM: a clean stop leaves the registry
    assert list(listed(cluster)) == ["worker-1"]  # and never lost


def server_says(cluster: Cluster, text: str) -> int:
    assert cluster.server is not None
    return cluster.server.log.read_text(errors="replace").count(text)


@pytest.mark.parametrize("which", ["garbage", "viewer"])
def test_a_worker_whose_token_is_refused_exits_2_naming_the_setting(
    cluster: Cluster, which: str
) -> None:
    cluster.start_server()
    token = "mp_not_a_token" if which == "garbage" else cluster.token("viewer")
    worker = cluster.start_worker(token=token)
    wait_for(lambda: not worker.alive(), "the worker to exit", timeout=30)
    text = tail(worker.log)
    assert worker.popen.returncode == 2, text
    status = "401 unauthorized" if which == "garbage" else "403 forbidden"
    assert f"refused the worker's token (HTTP {status}" in text
    assert "set MILEPOST_TOKEN to a token of role worker" in text
    assert "Traceback" not in text
    assert listed(cluster) == {}  # never registered


@pytest.fixture(params=["sqlite", "postgres"])
def roomy(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster whose claims last the default 30 s: a move between servers fits in one."""
    with database(request.param, tmp_path) as url, Cluster(url, tmp_path) as made:
        yield made


def test_a_worker_given_two_servers_moves_to_the_second_when_its_first_dies(
    roomy: Cluster, tmp_path: Path
) -> None:
    """Issue 33, item 8: a worker takes several server URLs (MILEPOST_SERVER_URL, comma-
    separated); its server SIGKILLed mid-attempt, it reports, heartbeats and claims
    through the other (its leases are in the shared database): the run completes, its
    step ran once."""
    roomy.start_server()
    second = roomy.start_other_server()
    out, block = tmp_path / "out.txt", tmp_path / "block"
    block.touch()
    roomy.start_worker(server_url=f"{roomy.url},{second}")
    xid = roomy.run(HELD, {"out": str(out), "block": str(block)})
    wait_for(lambda: len(lines(out)) == 1, "the attempt to start", timeout=30)
    roomy.kill_server()
    block.unlink()  # the attempt ends while its server is dead
    with MilepostClient(second, roomy.admin_token, timeout=30) as other:
        try:
            status = other.wait(xid, timeout=60)
        except Exception:
            print(roomy.diagnostics())
            raise
        assert status["status"] == "COMPLETED", roomy.diagnostics()
        types = [e["event_type"] for e in other.events(xid)]
    assert [line[0] for line in lines(out)] == ["held"], "ran once: no lease lapsed"
    assert "command.lease_expired" not in types
