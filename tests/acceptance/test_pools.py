"""Pools end to end (DSL 10.6): `milepost server` and `milepost worker` processes.

A step with `spec.pool: gpu` waits while only a default worker runs, and says so: the
run's status (the API and `milepost status --server`) names "no live worker of pool gpu"
and `/metrics` counts it; then a `--pool gpu` worker starts and runs it, and only it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from milepost.engine import workers
from milepost.store import factory
from tests.acceptance.harness import MILEPOST, Cluster, database
from tests.shared import metric_sample, wait_for

pytestmark = pytest.mark.slow

POOLED = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: pooled, path: acceptance/pooled}
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
    next: train
  - step: train
    spec: {pool: gpu}
    tool: {kind: python, input: {x: "{{ start }}"}, code: "result = x + 1"}
    next: done
  - step: done
    tool: {kind: python, input: {y: "{{ train }}"}, code: "result = y * 10"}
"""


@pytest.fixture(params=["sqlite", "postgres"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    with database(request.param, tmp_path) as url, Cluster(url, tmp_path) as c:
        yield c


def _without_worker(cluster: Cluster, pool: str) -> float:
    reply = httpx.get(
        cluster.url + "/metrics",
        timeout=10,
        headers={"Authorization": f"Bearer {cluster.admin_token}"},
    )
    reply.raise_for_status()
    return metric_sample(reply.text, "milepost_commands_without_worker", pool=pool)


def _claimers(cluster: Cluster, xid: str) -> dict[str, str]:
    return {
        e["step"]: e["worker_id"]
        for e in cluster.client.events(xid)
        if e["event_type"] == "command.claimed"
    }


def test_a_gpu_step_waits_visibly_for_a_gpu_worker_then_runs_on_it(cluster: Cluster) -> None:
    cluster.start_server()
    cluster.start_worker()  # the default pool only
    xid = cluster.run(POOLED)

    def waiting() -> dict[str, Any] | None:
        status = cluster.client.status(xid)
        gpu = [e for e in status.get("no_live_worker", []) if e["pool"] == "gpu"]
        return status if gpu else None

    status = wait_for(waiting, "the run to report its gpu step has no worker", timeout=60)
    assert status["status"] == "RUNNING"
    assert status["steps"]["start"]["status"] == "COMPLETED"
    assert status["steps"]["train"]["waiting"] == "no live worker of pool gpu"
    assert status["no_live_worker"] == [
        {"pool": "gpu", "commands": 1, "steps": ["train"], "message": "no live worker of pool gpu"}
    ]
    assert cluster.client.execution(xid)["no_live_worker"] == status["no_live_worker"]
    assert _without_worker(cluster, "gpu") == 1.0
    assert _without_worker(cluster, "default") == 0.0  # a default worker is alive
    shown = subprocess.run(
        [MILEPOST, "status", xid, "--server", cluster.url],
        env={**cluster.env, "MILEPOST_TOKEN": cluster.admin_token},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert (
        "waiting: 1 command(s) of step train: no live worker of pool gpu "
        "(start `milepost worker --pool gpu`)"
    ) in " ".join(shown.stdout.split())
    if not cluster.db_url.startswith("postgresql"):  # the local commands read SQLite files
        local = subprocess.run(
            [MILEPOST, "status", xid, "--db", cluster.db_url, "--json"],
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert local.returncode == 0, local.stderr
        assert json.loads(local.stdout)["no_live_worker"] == status["no_live_worker"]
    assert _claimers(cluster, xid) == {"start": "worker-1"}  # the default worker left it

    cluster.start_worker(pool="gpu")
    final = cluster.wait(xid, timeout=60)
    assert final["status"] == "COMPLETED", cluster.diagnostics()
    assert final["steps"]["done"]["result"] == 20
    assert "no_live_worker" not in final or final["no_live_worker"] == []
    # the gpu step ran on the gpu worker, the others on the default one
    assert _claimers(cluster, xid) == {"start": "worker-1", "train": "worker-2", "done": "worker-1"}
    assert _without_worker(cluster, "gpu") == 0.0  # reported once, back to 0 when served


def test_a_worker_on_a_fixed_machine_id_is_seen_alive_with_its_pool(cluster: Cluster) -> None:
    """It mints on MILEPOST_MACHINE_ID, and still holds a lease (its check-in): its pool is
    live."""
    cluster.start_server()
    cluster.env["MILEPOST_MACHINE_ID"] = "901"
    cluster.start_worker(pool="gpu")
    store = factory.open_store(cluster.db_url)
    try:
        wait_for(
            lambda: "gpu" in workers.live_pools(store, time.time()),
            "the fixed-id gpu worker to be seen alive",
            timeout=30,
        )
    finally:
        store.close()
