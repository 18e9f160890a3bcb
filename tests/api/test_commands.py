"""Commands: read, claim, claim-next, heartbeat, release; every 409 with its code."""

from __future__ import annotations

import threading

from tests.api.support import HELLO, LOOP, Api, error, ok


def claim(api: Api, command_id: str, worker: str = "w1", **body: object) -> object:
    return api.post(
        f"/api/commands/{command_id}/claim", {"worker_id": worker, **body}, role="worker"
    )


def test_get_a_command_without_a_lease(api: Api) -> None:
    xid = api.execute(HELLO, workload={"name": "Ada"})
    [row] = api.store.open_commands(int(xid))
    command = ok(api.get(f"/api/commands/{row.command_id}", role="viewer"))
    assert command["command_id"] == command["event_id"] == str(row.command_id)
    assert command["execution_id"] == xid and command["step"] == "start"
    assert command["status"] == "queued" and command["lease"] is None
    assert command["playbook"] == {"path": "tests/hello", "version": 1}
    # the context carries what the step reads (`workload.name`), not every workload key
    assert command["context"]["workload"] == {"name": "Ada"} and "name" not in command["context"]
    assert command["idempotency_key"] == row.idempotency_key and command["attempt"] == 1


def test_claim_returns_the_command_with_its_context_and_a_lease(api: Api) -> None:
    xid = api.execute(HELLO)
    [row] = api.store.open_commands(int(xid))
    command = ok(claim(api, str(row.command_id), lease_seconds=60))
    assert command["status"] == "claimed" and command["lease"]["epoch"] == 1
    assert command["context"]["execution_id"] == xid and command["loop_steps"] == {}
    assert command["run"] == 1 and command["index"] == -1
    again = ok(claim(api, str(row.command_id)))  # the holder claiming again: same lease epoch
    assert again["lease"]["epoch"] == 1
    stored = api.store.get_command(row.command_id)
    assert (stored.status, stored.worker_id, stored.epoch) == ("claimed", "w1", 1)


def test_claim_conflicts_each_have_their_code(api: Api) -> None:
    xid = api.execute(HELLO)
    [row] = api.store.open_commands(int(xid))
    cid = str(row.command_id)
    command = ok(claim(api, cid))
    body = error(claim(api, cid, "w2"), 409, "active_claim")
    assert body["command_id"] == cid
    # the holder named, as the NoETL server does: who to ask, and until when
    assert (body["worker_id"], body["epoch"]) == ("w1", 1)
    assert "'w1'" in body["message"] and body["lease_expires_at"].endswith("+00:00")
    api.complete(command, {"greeting": "hi"})
    error(claim(api, cid, "w2"), 409, "already_terminal")
    [shout] = api.store.open_commands(int(xid))
    ok(api.post(f"/api/executions/{xid}/cancel"))
    assert api.status(xid)["status"] == "CANCELLED"
    error(claim(api, str(shout.command_id)), 409, "execution_cancelled")
    error(claim(api, "424242"), 404, "command_not_found")
    error(claim(api, "x"), 422, "validation_error")
    error(api.post(f"/api/commands/{cid}/claim", {}, role="worker"), 422, "validation_error")
    error(
        api.post(
            f"/api/commands/{cid}/claim", {"worker_id": "w", "lease_seconds": 0}, role="worker"
        ),
        422,
        "validation_error",
    )
    error(api.get("/api/commands/424242"), 404, "command_not_found")
    conflicts = api.services.metrics.claim_conflicts
    assert conflicts.labels("active_claim")._value.get() == 1
    assert conflicts.labels("execution_cancelled")._value.get() == 1


def test_claims_of_a_run_whose_cancel_was_requested_are_refused(api: Api) -> None:
    xid = api.execute(LOOP)
    first, *_ = api.claim_next(limit=1)
    rows = [r for r in api.store.open_commands(int(xid)) if r.status == "queued"]
    assert len(rows) == 2
    ok(api.post(f"/api/executions/{xid}/cancel"))
    assert api.status(xid)["status"] == "RUNNING"  # the claimed iteration still runs
    error(claim(api, str(rows[0].command_id)), 409, "execution_cancelled")
    assert api.claim_next() == []
    api.complete(first, 10)
    assert api.status(xid)["status"] == "CANCELLED"


def test_claim_next_takes_the_oldest_queued_commands_up_to_the_limit(api: Api) -> None:
    xid = api.execute(LOOP, workload={"items": [1, 2, 3]})
    got = api.claim_next("w1", limit=2, lease_seconds=10)
    assert [c["index"] for c in got] == [0, 1]
    assert all(c["lease"]["epoch"] == 1 and c["execution_id"] == xid for c in got)
    assert got[0]["loop_steps"] == {}  # an iteration reads no loop step's result
    assert got[1]["context"]["n"] == 2 and got[1]["context"]["iter"]["n"] == 2
    rest = api.claim_next("w2", limit=5)
    assert [c["index"] for c in rest] == [2]
    assert api.claim_next("w3") == []
    for command in got + rest:
        api.complete(command, int(command["context"]["n"]) * 10)
    total = api.claim_one("w3")  # `total` reads `each`: its failed count comes along
    assert total["step"] == "total" and total["loop_steps"] == {"each": {"failed": 0}}
    assert total["context"]["each"] == [10, 20, 30]
    error(
        api.post("/api/commands/claim", {"worker_id": "w", "limit": 0}, role="worker"),
        422,
        "validation_error",
    )
    error(api.post("/api/commands/claim", {}, role="worker"), 422, "validation_error")


def test_claim_next_across_runs_hands_each_command_its_own_runs_context(api: Api) -> None:
    # the commands are rendered a run at a time (one take of its lock): the answer keeps
    # the claim's order, oldest first, whatever run each command is of
    first = api.execute(LOOP, workload={"items": [1, 2]})
    other = api.execute(HELLO, workload={"name": "Ada"})
    last = api.execute(LOOP, workload={"items": [7]})
    got = api.claim_next("w1", limit=10, lease_seconds=10)
    assert [(c["execution_id"], c["step"], c["index"]) for c in got] == [
        (first, "each", 0),
        (first, "each", 1),
        (other, "start", -1),
        (last, "each", 0),
    ]
    assert [c["context"].get("n") for c in got] == [1, 2, None, 7]
    assert got[2]["context"]["workload"] == {"name": "Ada"}
    assert all(c["context"]["execution_id"] == c["execution_id"] for c in got)


def test_heartbeat_extends_the_lease_and_refuses_a_stale_epoch(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one(lease_seconds=5)
    cid, epoch = command["command_id"], command["lease"]["epoch"]
    beat = ok(
        api.post(
            f"/api/commands/{cid}/heartbeat",
            {"worker_id": "w1", "epoch": epoch, "lease_seconds": 120},
            role="worker",
        )
    )
    assert beat["lease"]["epoch"] == epoch and beat["cancelled"] is False
    assert beat["lease"]["expires_at"] > command["lease"]["expires_at"]
    row = api.store.get_command(int(cid))
    assert row.lease_expires_at - api.services.engine.clock() > 100
    error(
        api.post(
            f"/api/commands/{cid}/heartbeat", {"worker_id": "w1", "epoch": epoch + 1}, role="worker"
        ),
        409,
        "stale_epoch",
    )
    error(
        api.post(
            f"/api/commands/{cid}/heartbeat", {"worker_id": "w2", "epoch": epoch}, role="worker"
        ),
        409,
        "stale_epoch",
    )
    error(
        api.post("/api/commands/999/heartbeat", {"worker_id": "w1", "epoch": 1}, role="worker"),
        404,
        "command_not_found",
    )
    error(
        api.post(f"/api/commands/{cid}/heartbeat", {"worker_id": "w1"}, role="worker"),
        422,
        "validation_error",
    )
    assert api.status(xid)["status"] == "RUNNING"


def test_release_queues_the_command_again_with_the_same_attempt_and_key(api: Api) -> None:
    api.execute(HELLO)
    command = api.claim_one("w1")
    cid, epoch = command["command_id"], command["lease"]["epoch"]
    error(
        api.post(
            f"/api/commands/{cid}/release", {"worker_id": "w2", "epoch": epoch}, role="worker"
        ),
        409,
        "stale_epoch",
    )
    assert ok(
        api.post(f"/api/commands/{cid}/release", {"worker_id": "w1", "epoch": epoch}, role="worker")
    ) == {"released": True}
    again = api.claim_one("w2")
    assert again["command_id"] == cid and again["attempt"] == command["attempt"]
    assert again["idempotency_key"] == command["idempotency_key"]
    assert again["lease"]["epoch"] == epoch + 1
    error(
        api.post("/api/commands/999/release", {"worker_id": "w1", "epoch": 1}, role="worker"),
        404,
        "command_not_found",
    )


def test_a_command_released_after_its_run_was_cancelled_is_settled(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one("w1")
    ok(api.post(f"/api/executions/{xid}/cancel"))
    assert api.status(xid)["status"] == "RUNNING"
    reply = ok(
        api.post(
            f"/api/commands/{command['command_id']}/release",
            {"worker_id": "w1", "epoch": command["lease"]["epoch"]},
            role="worker",
        )
    )
    assert reply == {"released": True}
    assert api.status(xid)["status"] == "CANCELLED"
    assert api.store.open_commands(int(xid)) == []


def test_concurrent_claimers_never_get_the_same_command(api: Api) -> None:
    xid = api.execute(
        LOOP.replace("max_in_flight: 3", "max_in_flight: 24"), workload={"items": list(range(24))}
    )
    got: list[str] = []
    lock = threading.Lock()

    def claimer(worker: str) -> None:
        while True:
            commands = api.claim_next(worker, limit=3)
            if not commands:
                return
            with lock:
                got.extend(c["command_id"] for c in commands)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(got) == 24 and len(set(got)) == 24
    assert {r.status for r in api.store.open_commands(int(xid))} == {"claimed"}
