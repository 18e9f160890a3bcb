"""Pools over HTTP (DSL 10.6): the claim route filters by pool; a worker's machine-id
request names its pool; the status, the execution and `/metrics` report the queued
commands of a pool with no live worker."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.support import GPU, Api, error, ok, playbook
from tests.api.test_cli import cli
from tests.shared import metric_sample


def _without_worker(api: Api, pool: str) -> float:
    reply = api.get("/metrics")
    assert reply.status_code == 200, reply.text
    return metric_sample(reply.text, "milepost_commands_without_worker", pool=pool)


def test_a_gpu_command_is_reported_until_a_gpu_worker_is_alive(api: Api) -> None:
    xid = api.execute(GPU)
    missing = [
        {"pool": "gpu", "commands": 1, "steps": ["train"], "message": "no live worker of pool gpu"}
    ]
    status = api.status(xid)
    assert status["no_live_worker"] == missing
    assert status["steps"]["train"]["waiting"] == "no live worker of pool gpu"
    assert ok(api.get(f"/api/executions/{xid}"))["no_live_worker"] == missing
    assert _without_worker(api, "gpu") == 1.0
    assert api.claim_next("w1", pool="default") == []  # a default worker takes nothing
    ok(api.post("/api/workers/machine-id", {"worker_id": "w1"}, role="worker"))
    assert api.status(xid)["no_live_worker"] == missing  # a default worker is no gpu worker
    ok(api.post("/api/workers/machine-id", {"worker_id": "g1", "pool": "gpu"}, role="worker"))
    listed = ok(api.get("/api/workers?status=live"))["items"]
    assert sorted((w["name"], w["pools"]) for w in listed) == [("g1", ["gpu"]), ("w1", ["default"])]
    assert api.status(xid)["no_live_worker"] == []
    assert "waiting" not in api.status(xid)["steps"]["train"]
    assert _without_worker(api, "gpu") == 0.0
    command = api.claim_one("g1", pool="gpu")
    assert command["step"] == "train"
    api.complete(command, 1)
    assert api.status(xid)["status"] == "COMPLETED"


THEN_GPU = playbook(
    "tests/then-gpu",
    """
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
    next: train
  - step: train
    spec: {pool: gpu}
    tool: {kind: python, code: "result = 2"}
""",
)


def test_a_status_read_while_a_report_commits_names_only_steps_it_shows(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the status read the run's state, then the queued commands of pools without a worker:
    # a report committed in between named `train` as waiting in an answer where `start`
    # was still running and `train` not yet a step (a flaky acceptance test found it)
    xid = api.execute(THEN_GPU)
    start = api.claim_one("w1")
    engine = api.services.engine
    read_pools = engine.missing_workers
    reported: list[str] = []

    def pools_while_a_report_commits(execution_id: int | None = None) -> Any:
        if not reported:
            reported.append(xid)
            api.complete(start, 1)  # the report lands between the status's two reads
        return read_pools(execution_id)

    monkeypatch.setattr(engine, "missing_workers", pools_while_a_report_commits)
    status = api.status(xid)
    assert reported == [xid]
    assert status["no_live_worker"] == [
        {"pool": "gpu", "commands": 1, "steps": ["train"], "message": "no live worker of pool gpu"}
    ]
    assert status["steps"]["start"]["status"] == "COMPLETED"
    assert status["steps"]["train"]["waiting"] == "no live worker of pool gpu"


def test_the_status_of_an_ended_run_reads_no_pools(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a status long-poll answers when the run ends: the queued commands of pools without
    # a worker were read on every answer, for a run that waits on none
    xid = api.execute(GPU)
    engine = api.services.engine
    read_pools = engine.missing_workers
    reads: list[int | None] = []

    def counted(execution_id: int | None = None) -> Any:
        reads.append(execution_id)
        return read_pools(execution_id)

    monkeypatch.setattr(engine, "missing_workers", counted)
    assert api.status(xid)["no_live_worker"][0]["pool"] == "gpu"
    assert reads == [int(xid)]
    ok(api.post("/api/workers/machine-id", {"worker_id": "g1", "pool": "gpu"}, role="worker"))
    api.complete(api.claim_one("g1", pool="gpu"), 1)
    status = api.status(xid)
    assert (status["status"], status["no_live_worker"]) == ("COMPLETED", [])
    assert reads == [int(xid)]


def test_a_machine_id_request_with_a_bad_pool_is_refused(api: Api) -> None:
    body = error(
        api.post("/api/workers/machine-id", {"worker_id": "w", "pool": "gpu a"}, role="worker"),
        422,
        "validation_error",
    )
    assert body["errors"][0]["loc"] == ["body", "pool"]


def test_milepost_worker_refuses_a_bad_pool_before_it_starts() -> None:
    for args, env in ((["--pool", "gpu a"], {}), ([], {"MILEPOST_POOL": "gpu/a"})):
        done = cli("worker", "--server", "http://127.0.0.1:9", *args, env=env)
        assert done.returncode == 2, done.stderr
        assert "invalid pool" in done.stderr and "--pool or MILEPOST_POOL" in done.stderr
