"""Cancellation through the server (issue 11, item 2): the request names who asked, the
grace ends with every attempt still live abandoned by the engine, children are cancelled
with their parent, an ended run is never moved to another terminal state."""

from __future__ import annotations

from typing import Any

from milepost.core import events as ev
from milepost.core import fold as fl
from tests.api.support import HELLO, Api, FakeClock, error, ok, playbook, report_wire

GRACE = playbook(
    "tests/graceful",
    """
executor: {spec: {cancel_grace: 5s}}
workflow:
  - step: slow
    tool: {kind: python, code: "result = 1"}
    next: after
  - step: after
    tool: {kind: python, code: "result = 2"}
""",
)

CHILD = playbook(
    "tests/child",
    """
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
""",
)


def events_of(api: Api, xid: str, event_type: str) -> list[ev.Event]:
    return [e for e in api.store.load(int(xid)) if e.event_type == event_type]


def test_the_request_names_the_token_that_asked(fake: Api) -> None:
    xid = fake.execute(HELLO)
    ok(fake.post(f"/api/executions/{xid}/cancel", role="operator"))
    [request] = events_of(fake, xid, ev.EXECUTION_CANCEL_REQUESTED)
    assert request.payload == {"actor": "token:test-operator"}


def test_a_cancel_posted_as_an_event_is_logged_with_its_caller_not_the_actor_it_names(
    fake: Api,
) -> None:
    """The event routes are no way around the cancel route: a client that names another
    actor, or a parent's cancel as the cause, is logged as itself."""
    xid = fake.execute(HELLO)
    forged = {
        "execution_id": xid,
        "event_type": ev.EXECUTION_CANCEL_REQUESTED,
        "context": {"actor": "user:ceo", "cause": "parent 1 cancelled"},
    }
    ok(fake.post("/api/events", forged, role="operator"))
    [request] = events_of(fake, xid, ev.EXECUTION_CANCEL_REQUESTED)
    assert request.payload == {"actor": "token:test-operator"}


def test_a_completed_run_is_never_moved_to_cancelled(fake: Api) -> None:
    xid = fake.execute(HELLO)
    fake.complete(fake.claim_one(), {"greeting": "hi"})
    fake.complete(fake.claim_one(), {"loud": "HI"})
    assert fake.status(xid)["status"] == "COMPLETED"
    before = fake.store.event_count(int(xid))
    body = error(fake.post(f"/api/executions/{xid}/cancel"), 409, "already_terminal")
    assert body["status"] == "COMPLETED"
    assert fake.status(xid)["status"] == "COMPLETED"
    assert fake.store.event_count(int(xid)) == before


def test_an_attempt_still_running_when_the_grace_ends_is_abandoned_and_its_report_is_late(
    fake: Api, clock: FakeClock
) -> None:
    xid = fake.execute(GRACE)
    command = fake.claim_one(lease_seconds=60)
    asked = clock()
    assert ok(fake.post(f"/api/executions/{xid}/cancel"))["status"] == "RUNNING"
    reconciler = fake.services.reconciler
    # the decision that took the request set the timer of the grace's end
    assert (asked + 5, int(xid)) in reconciler.pending_timers()
    reconciler.tick(clock.advance(4))
    assert fake.status(xid)["status"] == "RUNNING"  # the worker still has a second
    report = reconciler.tick(clock.advance(2))
    assert report.woken == [int(xid)]
    status = fake.status(xid)
    assert status["status"] == "CANCELLED"
    assert "after" not in status["steps"]
    [abandoned] = events_of(fake, xid, ev.COMMAND_FAILED)
    assert abandoned.payload["command_id"] == int(command["command_id"])
    assert abandoned.payload["error"] == {
        "kind": "cancelled",
        "retryable": False,
        "message": "execution cancelled: attempt abandoned after the cancel grace (5s)",
    }
    assert abandoned.meta["epoch"] == command["lease"]["epoch"]
    # the worker that ignored it all: its heartbeat is refused, its report changes nothing
    error(
        fake.post(
            f"/api/commands/{command['command_id']}/heartbeat",
            {"worker_id": "w1", "epoch": command["lease"]["epoch"]},
            role="worker",
        ),
        409,
        "stale_epoch",
    )
    before = fake.store.event_count(int(xid))
    fake.post("/api/events/batch", {"events": report_wire(command, 1)}, role="worker")
    assert fake.status(xid)["status"] == "CANCELLED"
    assert fake.store.event_count(int(xid)) == before
    assert events_of(fake, xid, ev.COMMAND_COMPLETED) == []
    # had it come before the run's end, the fold would have marked it stale: the engine
    # settled that command, the run waits for it no more
    log = [e for e in fake.store.load(int(xid)) if e.event_type != ev.EXECUTION_CANCELLED]
    [late] = fl.fold_reports(fl.fold(None, log), [ingest_one(command)])
    assert late.meta["stale"] is True and late.meta["stale_reason"] == fl.SETTLED


def ingest_one(command: dict[str, Any]) -> ev.Event:
    """The core event of a worker's report of `command` (what the ingest makes of it)."""
    return ev.new_event(
        10**15 + 7,
        int(command["execution_id"]),
        ev.COMMAND_COMPLETED,
        0.0,
        step=command["step"],
        meta={"epoch": command["lease"]["epoch"]},
        payload={
            "command_id": int(command["command_id"]),
            "run": 1,
            "index": -1,
            "attempt": 1,
            "result": 1,
            "ctx": {},
        },
    )


def _child_of(api: Api, parent: str) -> str:
    """A child of `parent`, as the playbook tool starts one (an admin needs no claim)."""
    entry = api.register(CHILD)
    body = {"path": entry["path"], "parent_execution_id": parent}
    return str(ok(api.post("/api/execute", body))["execution_id"])


def test_children_are_cancelled_with_their_parent_recursively(fake: Api) -> None:
    parent = fake.execute(HELLO)
    fake.claim_one("w1", lease_seconds=60)
    child = _child_of(fake, parent)
    child_command = fake.claim_one("w2", lease_seconds=60)
    grandchild = _child_of(fake, child)
    ok(fake.post(f"/api/executions/{parent}/cancel", role="operator"))
    for xid, cause in (
        (child, f"parent {parent} cancelled"),
        (grandchild, f"parent {child} cancelled"),
    ):
        [request] = events_of(fake, xid, ev.EXECUTION_CANCEL_REQUESTED)
        assert request.payload == {"actor": "token:test-operator", "cause": cause}
    # the grandchild's command was never claimed: settled, it ends at once
    assert fake.status(grandchild)["status"] == "CANCELLED"
    beat = ok(
        fake.post(
            f"/api/commands/{child_command['command_id']}/heartbeat",
            {"worker_id": "w2", "epoch": child_command["lease"]["epoch"]},
            role="worker",
        )
    )
    assert beat["cancelled"] is True


def test_a_child_started_after_its_parents_cancel_is_cancelled_at_once(fake: Api) -> None:
    parent = fake.execute(HELLO)
    fake.claim_one("w1", lease_seconds=60)
    ok(fake.post(f"/api/executions/{parent}/cancel"))
    child = _child_of(fake, parent)
    assert fake.status(child)["status"] == "CANCELLED"
    [request] = events_of(fake, child, ev.EXECUTION_CANCEL_REQUESTED)
    assert request.payload == {"actor": "token:test-admin", "cause": f"parent {parent} cancelled"}
