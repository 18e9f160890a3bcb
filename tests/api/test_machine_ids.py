"""Machine ids (issue 8, item 1): the server leases its own, and hands workers theirs."""

from __future__ import annotations

import time

import pytest

from milepost.api import app as app_module
from milepost.ids import machine_of
from milepost.store import factory, port
from tests.api.support import HELLO, Api, error, ok, start_server
from tests.sql import query


def _leases(api: Api) -> dict[int, str]:
    return {
        int(m): str(h)
        for m, h in query(api.store, "SELECT machine_id, holder FROM machine_lease", ())
    }


def test_the_server_leases_its_machine_id_and_gives_it_back_at_shutdown(db_url: str) -> None:
    with start_server(db_url) as api:
        leased = api.services.machine_ids
        assert leased is not None and leased.machine_id in port.MACHINE_IDS
        assert _leases(api)[leased.machine_id].startswith("server:")
        xid = api.execute(HELLO)
        assert {machine_of(e.event_id) for e in api.store.load(int(xid))} == {leased.machine_id}
        store_url = db_url
    with start_server(store_url) as again:  # released: the next server takes the same id
        assert again.services.machine_ids is not None
        assert again.services.machine_ids.machine_id == leased.machine_id


def test_a_server_that_fails_to_start_gives_its_machine_id_back(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("metrics could not start")

    # after the engine (and its lease) is built: the metrics' gauges are set up on it
    monkeypatch.setattr(app_module.Metrics, "watch_queue", broken)
    with pytest.raises(RuntimeError, match="metrics could not start"), start_server(db_url):
        pass
    store = factory.open_store(db_url)
    try:
        [lease] = store.machine_leases()
        assert lease.expires_at <= time.time()  # ended now, not held for its ttl
        assert store.lease_machine_id("next", time.time(), 60.0) == 1  # the next server's
    finally:
        store.close()


def test_a_machine_id_set_in_the_settings_is_used_and_leased_so_nobody_else_takes_it(
    db_url: str,
) -> None:
    with start_server(db_url, machine_id=5) as api:
        assert api.services.machine_ids is not None
        assert list(_leases(api)) == [5] and _leases(api)[5].startswith("server:")
        xid = api.execute(HELLO)
        assert {machine_of(e.event_id) for e in api.store.load(int(xid))} == {5}
        worker = ok(api.post("/api/workers/machine-id", {"worker_id": "w1"}, role="worker"))
        assert worker["machine_id"] == 1
        # a worker minting on MILEPOST_MACHINE_ID asks for it: taken, it gets another one
        fixed = {"worker_id": "w2", "machine_id": 5}
        assert ok(api.post("/api/workers/machine-id", fixed, role="worker"))["machine_id"] == 2


def test_workers_lease_renew_and_lose_machine_ids(api: Api) -> None:
    server = api.services.machine_ids
    assert server is not None
    first = ok(api.post("/api/workers/machine-id", {"worker_id": "w1"}, role="worker"))
    second = ok(api.post("/api/workers/machine-id", {"worker_id": "w2"}, role="worker"))
    assert first["renewed"] is False and first["expires_at"] > 0
    assert len({first["machine_id"], second["machine_id"], server.machine_id}) == 3
    again = ok(
        api.post(
            "/api/workers/machine-id",
            {"worker_id": "w1", "machine_id": first["machine_id"]},
            role="worker",
        )
    )
    assert again["machine_id"] == first["machine_id"] and again["renewed"] is True
    # w1 asks to renew w2's id (as after w1's own lapsed and w2 took it): w1 gets a new one
    moved = ok(
        api.post(
            "/api/workers/machine-id",
            {"worker_id": "w1", "machine_id": second["machine_id"]},
            role="worker",
        )
    )
    assert moved["renewed"] is False  # not w2's: w1's own, whose row it still holds
    assert moved["machine_id"] not in {second["machine_id"], server.machine_id}
    assert _leases(api)[second["machine_id"]] == "worker:w2"


def test_the_machine_id_route_is_for_workers_and_checks_its_body(api: Api) -> None:
    error(api.post("/api/workers/machine-id", {"worker_id": "w1"}, role="viewer"), 403, "forbidden")
    body = error(
        api.post("/api/workers/machine-id", {"worker_id": "w1", "machine_id": 5000}, role="worker"),
        422,
        "validation_error",
    )
    assert body["errors"][0]["loc"] == ["body", "machine_id"]
