"""`GET /api/workers`: the registry a worker's machine-id check-ins write, with what each
holds, filtered by pool and status; lost once a worker stops checking in for its ttl,
and said once by the reconciler; the command of a lost worker recovers through its lease."""

from __future__ import annotations

from typing import Any

import pytest

from milepost.engine import workers
from tests.api.support import GPU, HELLO, Api, FakeClock, error, ok
from tests.shared import metric_sample


def check_in(
    api: Api, key: str, machine_id: int | None = None, *, pool: str = "default", **worker: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"worker_id": key, "pool": pool, "worker": worker}
    if machine_id is not None:
        body["machine_id"] = machine_id
    return ok(api.post("/api/workers/machine-id", body, role="worker"))


def listed(api: Api, query: str = "", role: str = "viewer") -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in ok(api.get(f"/api/workers{query}", role=role))["items"]}


def workers_metric(api: Api, pool: str, status: str) -> float:
    reply = api.get("/metrics")
    assert reply.status_code == 200, reply.text
    return metric_sample(reply.text, "milepost_workers", pool=pool, status=status)


def test_a_check_in_lists_the_worker_with_what_it_runs(fake: Api, clock: FakeClock) -> None:
    assert listed(fake) == {}
    leased = check_in(fake, "w1/ab", name="w1", host="box-1", pid=4242, version="0.1.0", ttl=30.0)
    fake.execute(HELLO)
    command = fake.claim_one("w1")
    [worker] = listed(fake).values()
    started = worker["started_at"]
    assert worker == {
        "name": "w1",
        "worker_key": "w1/ab",
        "kind": "worker",
        "pools": ["default"],
        "host": "box-1",
        "pid": 4242,
        "version": "0.1.0",
        "started_at": started,
        "last_seen": started,
        "ttl": 30.0,
        "status": "live",
        "lost_at": None,
        "running": [
            {
                "command_id": command["command_id"],
                "execution_id": command["execution_id"],
                "step": "start",
            }
        ],
    }
    clock.advance(10)
    check_in(fake, "w1/ab", leased["machine_id"], name="w1", host="box-1", pid=4242, ttl=30.0)
    again = listed(fake)["w1"]
    assert again["started_at"] == started and again["last_seen"] > started
    fake.complete(command, "hi")
    assert listed(fake)["w1"]["running"] == []


def test_the_list_filters_by_pool_and_status(fake: Api, clock: FakeClock) -> None:
    check_in(fake, "old/1", name="old", ttl=5.0)
    clock.advance(6)
    check_in(fake, "cpu/1", name="cpu", ttl=30.0)
    check_in(fake, "gpu/1", name="gpu", pool="gpu", ttl=30.0)
    assert {n: w["status"] for n, w in listed(fake).items()} == {
        "cpu": "live",
        "gpu": "live",
        "old": "lost",
    }
    assert list(listed(fake, "?pool=gpu")) == ["gpu"]
    assert list(listed(fake, "?status=lost")) == ["old"]
    assert list(listed(fake, "?pool=default&status=live")) == ["cpu"]
    assert listed(fake, "?pool=tpu") == {}


@pytest.mark.parametrize(("query", "loc"), [("?status=dead", "status"), ("?pool=a%20b", "pool")])
def test_a_bad_filter_is_refused_naming_it(api: Api, query: str, loc: str) -> None:
    body = error(api.get(f"/api/workers{query}"), 422, "validation_error")
    assert body["errors"][0]["loc"] == ["query", loc]


def test_the_list_needs_a_reading_role(api: Api) -> None:
    error(api.get("/api/workers", role=None), 401, "unauthorized")
    error(api.get("/api/workers", role="worker"), 403, "forbidden")
    assert ok(api.get("/api/workers", role="viewer")) == {"items": [], "without_worker": []}


def test_a_bad_check_in_is_refused(api: Api) -> None:
    body = error(
        api.post(
            "/api/workers/machine-id", {"worker_id": "w", "worker": {"ttl": 0}}, role="worker"
        ),
        422,
        "validation_error",
    )
    assert body["errors"][0]["loc"] == ["body", "worker", "ttl"]


def test_a_worker_that_stops_checking_in_is_lost_said_once_and_its_command_recovers(
    fake: Api, clock: FakeClock
) -> None:
    check_in(fake, "gone/1", name="gone", pool="gpu", ttl=5.0)
    xid = fake.execute(GPU)
    command = fake.claim_one("gone", pool="gpu", lease_seconds=5.0)
    assert fake.status(xid)["no_live_worker"] == []
    reconciler = fake.services.reconciler
    assert reconciler.tick(clock.advance(4)).lost_workers == []
    report = reconciler.tick(clock.advance(2))
    assert report.lost_workers == ["gone"]
    assert report.expired == [int(command["command_id"])]  # its claim lapsed with it
    assert reconciler.tick(clock.advance(1)).lost_workers == []  # said once
    gone = listed(fake)["gone"]
    assert gone["status"] == "lost" and gone["lost_at"] is not None
    assert workers_metric(fake, "gpu", "lost") == 1.0 and workers_metric(fake, "gpu", "live") == 0
    assert gone["running"] == []  # re-issued: queued for another gpu worker
    assert fake.status(xid)["no_live_worker"][0]["pool"] == "gpu"
    check_in(fake, "new/1", name="new", pool="gpu", ttl=5.0)
    again = fake.claim_one("new", pool="gpu")
    assert again["step"] == "train" and again["command_id"] != command["command_id"]
    assert listed(fake, "?status=live")["new"]["running"][0]["step"] == "train"
    assert workers_metric(fake, "gpu", "live") == 1.0
    clock.advance(workers.FORGET_AFTER)
    reconciler.tick(clock.advance(1))
    assert listed(fake) == {}  # lost for a day: forgotten
    assert workers_metric(fake, "gpu", "lost") == 0.0  # the series stays, at 0


def test_a_released_check_in_gives_the_id_back_and_leaves_the_registry(api: Api) -> None:
    leased = check_in(api, "w1/ab", name="w1")
    assert list(listed(api)) == ["w1"]
    body = {
        "worker_id": "w1/ab",
        "machine_id": leased["machine_id"],
        "release": True,
        "worker": {"name": "w1"},
    }
    ok(api.post("/api/workers/machine-id", body, role="worker"))
    assert listed(api) == {}
    # the id is free again: the next worker gets it
    assert check_in(api, "w2/cd", name="w2")["machine_id"] == leased["machine_id"]


def test_a_workers_name_is_its_tokens_while_it_is_live(fake: Api, clock: FakeClock) -> None:
    """Issue 33, item 8: another token registered a live worker's name (or its process
    key, with a short ttl, then gave it back) and the live worker showed as lost."""
    leased = check_in(fake, "w1/ab", name="w1", ttl=30.0)
    intruder = {"worker_id": "w1/zz", "worker": {"name": "w1", "ttl": 1.0}}
    body = error(
        fake.post("/api/workers/machine-id", intruder, role="admin"), 409, "worker_name_taken"
    )
    assert body["name"] == "w1" and body["holder"] == "token 'test-worker' (role worker)"
    assert "'w1' is held by a live worker of token 'test-worker'" in body["message"]
    same_key = {"worker_id": "w1/ab", "worker": {"name": "w9", "ttl": 1.0}}
    error(fake.post("/api/workers/machine-id", same_key, role="admin"), 409, "worker_name_taken")
    gone = {"worker_id": "w1/ab", "machine_id": leased["machine_id"], "release": True}
    ok(fake.post("/api/workers/machine-id", gone, role="admin"))  # not its own: nothing done
    clock.advance(5)
    assert {name: w["status"] for name, w in listed(fake).items()} == {"w1": "live"}
    assert check_in(fake, "w1/ab", leased["machine_id"], name="w1", ttl=30.0)["renewed"]
    clock.advance(31)  # lost: its name is free for anyone
    assert ok(fake.post("/api/workers/machine-id", intruder, role="admin"))["renewed"] is False
    assert {w["worker_key"] for w in listed(fake).values()} == {"w1/zz"}


def test_a_worker_refused_its_name_leases_no_machine_id(fake: Api) -> None:
    check_in(fake, "w1/ab", name="w1")
    before = fake.store.machine_leases()
    intruder = {"worker_id": "w1/zz", "worker": {"name": "w1"}}
    error(fake.post("/api/workers/machine-id", intruder, role="admin"), 409, "worker_name_taken")
    assert fake.store.machine_leases() == before
