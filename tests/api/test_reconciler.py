"""The reconciler, driven with a fake clock: lost leases, retry timers, wake-ups, re-drives."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.engine import notify
from milepost.engine.clock import WAKE
from tests.api.support import HELLO, LOOP, RETRY, Api, FakeClock, ok, report_wire, start_server
from tests.shared import wait_for


class Recorder:
    """A publisher that remembers what it was asked to publish."""

    def __init__(self) -> None:
        self.notices: list[notify.Notice] = []

    def notify(self, notices: Sequence[notify.Notice]) -> None:
        self.notices.extend(notices)

    def notify_cancelled(self, execution_ids: Sequence[int]) -> None:
        return None

    async def close(self) -> None:
        return None


@pytest.fixture
def fake(db_url: str, clock: FakeClock) -> Iterator[Api]:
    with start_server(db_url, clock=clock) as server:
        recorder = Recorder()
        server.services.engine.publisher = recorder
        server.services.reconciler.publisher = recorder
        yield server


def recorder(api: Api) -> Recorder:
    publisher = api.services.engine.publisher
    assert isinstance(publisher, Recorder)
    return publisher


def issued(api: Api, xid: str) -> list[dict[str, Any]]:
    return [e.payload for e in api.store.load(int(xid)) if e.event_type == ev.COMMAND_ISSUED]


def test_an_expired_claim_is_reported_lost_and_a_new_attempt_issued(
    fake: Api, clock: FakeClock
) -> None:
    xid = fake.execute(HELLO)
    command = fake.claim_one(lease_seconds=5)
    reconciler = fake.services.reconciler
    assert reconciler.tick(clock.advance(4)).expired == []
    report = reconciler.tick(clock.advance(2))
    assert report.expired == [int(command["command_id"])]
    lost = [e for e in fake.store.load(int(xid)) if e.event_type == ev.COMMAND_LEASE_EXPIRED]
    assert [e.payload["command_id"] for e in lost] == [int(command["command_id"])]
    first, second = issued(fake, xid)
    assert second["attempt"] == 2 and second["step"] if "step" in second else True
    assert second["idempotency_key"] != first["idempotency_key"]
    assert reconciler.tick(clock.advance(1)).expired == []  # reported once
    retry = fake.claim_one("w2")
    assert retry["attempt"] == 2 and retry["idempotency_key"] == second["idempotency_key"]
    # the lost worker's late report is fenced off; the new attempt's counts
    late = fake.complete(command, {"greeting": "late"})
    assert late["stale"] == late["event_ids"]
    fake.complete(retry, {"greeting": "retried"})
    assert fake.status(xid)["steps"]["start"]["result"] == {"greeting": "retried"}
    assert sample_notice_ids(fake) >= {int(first["command_id"]), int(second["command_id"])}
    assert fake.services.metrics.leases_expired._value.get() == 1


def sample_notice_ids(api: Api) -> set[int]:
    return {n.command_id for n in recorder(api).notices}


def test_a_command_lost_three_times_fails_the_run(fake: Api, clock: FakeClock) -> None:
    xid = fake.execute(HELLO)
    for _ in range(3):
        fake.claim_one(lease_seconds=1)
        fake.services.reconciler.tick(clock.advance(2))
    status = fake.status(xid)
    assert status["status"] == "FAILED" and status["error"]["kind"] == "lost"


def test_a_retry_timer_wakes_the_run_when_it_is_due(fake: Api, clock: FakeClock) -> None:
    xid = fake.execute(RETRY)
    command = fake.claim_one()
    fake.complete(command, ok_=False, error={"kind": "error", "message": "flaky"})
    reconciler = fake.services.reconciler
    [(at, woken)] = reconciler.pending_timers()
    assert woken == int(xid) and at == pytest.approx(clock.now + 30, abs=1)
    assert reconciler.tick(clock.advance(10)).woken == []
    assert len(issued(fake, xid)) == 1
    assert reconciler.tick(clock.advance(21)).woken == [int(xid)]
    second = issued(fake, xid)[-1]
    assert second["attempt"] == 2 and reconciler.pending_timers() == []
    fake.complete(fake.claim_one(), 1)
    assert fake.status(xid)["status"] == "COMPLETED"


def test_the_engines_clock_fires_a_retry_timer_at_its_time_without_a_tick(
    fake: Api, clock: FakeClock
) -> None:
    xid = fake.execute(RETRY)
    fake.complete(fake.claim_one(), ok_=False, error={"kind": "error", "message": "flaky"})
    timers = fake.services.engine.timers
    [(at, _)] = timers.pending(WAKE)
    assert timers.next_due() == at
    # the engine reads the same clock the test steps: its decision is made at `at` too
    clock.now = at - 0.001
    assert timers.step(clock()) == {}
    assert len(issued(fake, xid)) == 1
    clock.now = at
    assert timers.step(clock()) == {WAKE: [int(xid)]}  # no reconciler tick
    assert issued(fake, xid)[-1]["attempt"] == 2 and timers.pending(WAKE) == []


def test_an_ended_run_leaves_no_timer(fake: Api, clock: FakeClock) -> None:
    xid = fake.execute(RETRY)
    fake.complete(fake.claim_one(), ok_=False, error={"kind": "error", "message": "flaky"})
    assert [x for _, x in fake.services.engine.timers.pending(WAKE)] == [int(xid)]
    ok(fake.post(f"/api/executions/{xid}/cancel", {}, role="operator"))
    wait_for(lambda: fake.status(xid)["status"] == "CANCELLED", "the cancel")
    assert fake.services.engine.timers.pending(WAKE) == []


def _failed_once(db_url: str, clock: FakeClock) -> str:
    """A run of RETRY whose first attempt failed: it waits 30 s for a timer, no command."""
    with start_server(db_url, clock=clock) as first:
        xid = first.execute(RETRY)
        first.complete(first.claim_one(), ok_=False, error={"kind": "error", "message": "x"})
        return xid


def test_a_restarted_server_recovers_the_retry_timers(db_url: str, clock: FakeClock) -> None:
    xid = _failed_once(db_url, clock)
    with start_server(db_url, clock=clock) as second:
        reconciler = second.services.reconciler
        assert reconciler.pending_timers() == []  # timers lived in the first server's memory
        assert reconciler.recover() == 1
        assert [x for _, x in reconciler.pending_timers()] == [int(xid)]
        assert reconciler.tick(clock.advance(6)).redriven == []  # waiting on purpose
        assert reconciler.tick(clock.advance(30)).woken == [int(xid)]
        assert [r.attempt for r in second.store.open_commands(int(xid))] == [2]


def test_an_idle_run_nobody_holds_a_timer_for_is_redriven(db_url: str, clock: FakeClock) -> None:
    xid = _failed_once(db_url, clock)
    with start_server(db_url, clock=clock) as second:
        reconciler = second.services.reconciler
        assert reconciler.tick(clock.advance(4)).redriven == []  # not idle long enough
        report = reconciler.tick(clock.advance(2))
        assert report.redriven == [int(xid)] and len(issued(second, xid)) == 1
        assert [x for _, x in reconciler.pending_timers()] == [int(xid)]
        assert reconciler.tick(clock.advance(1)).redriven == []  # its timer is known now
        assert reconciler.tick(clock.advance(30)).woken == [int(xid)]
        assert issued(second, xid)[-1]["attempt"] == 2


def test_commands_queued_too_long_are_announced_again(fake: Api, clock: FakeClock) -> None:
    xid = fake.execute(HELLO)
    [row] = fake.store.open_commands(int(xid))
    assert [n.command_id for n in recorder(fake).notices] == [row.command_id]
    reconciler = fake.services.reconciler
    assert reconciler.tick(clock.advance(3)).republished == []
    assert reconciler.tick(clock.advance(3)).republished == [row.command_id]
    assert reconciler.tick(clock.advance(1)).republished == []  # not every second
    assert reconciler.tick(clock.advance(5)).republished == [row.command_id]
    assert [n.command_id for n in recorder(fake).notices] == [row.command_id] * 3


def test_queued_commands_of_a_run_cancelled_behind_the_servers_back_are_settled(
    fake: Api, clock: FakeClock
) -> None:
    xid = fake.execute(HELLO)
    # `milepost cancel` appends the request straight to the log, without the server
    fake.store.append([ev.new_event(10**15, int(xid), ev.EXECUTION_CANCEL_REQUESTED, clock())])
    report = fake.services.reconciler.tick(clock.advance(6))
    assert report.cancelled == [int(xid)] and report.republished == []
    assert fake.status(xid)["status"] == "CANCELLED"


def test_the_server_runs_the_reconciler_on_its_own(db_url: str) -> None:
    with start_server(db_url, reconcile_interval=0.05) as api:
        xid = api.execute(HELLO)
        command = api.claim_one(lease_seconds=0.2)
        wait_for(lambda: ev.COMMAND_LEASE_EXPIRED in api.event_types(xid), "the lease to expire")
        retry = wait_for(lambda: api.claim_next("w2"), "the re-issued command")
        assert retry[0]["attempt"] == 2
        ok(
            api.post(
                "/api/events/batch",
                {"events": report_wire(retry[0], {"greeting": "x"})},
                role="worker",
            )
        )
        assert command["attempt"] == 1


def test_a_lost_command_is_no_longer_listed_as_claimed(fake: Api, clock: FakeClock) -> None:
    fake.execute(HELLO)
    command = fake.claim_one(lease_seconds=1)
    fake.services.reconciler.tick(clock.advance(2))
    assert fake.store.get_command(int(command["command_id"])).status != "claimed"
    assert fake.store.expired_claims(clock.advance(1)) == []


def test_a_loop_failed_for_good_ends_failed_when_a_sibling_then_loses_its_lease(
    fake: Api, clock: FakeClock
) -> None:
    # issue 8, item 2: this run used to hang RUNNING with a retry of index 1 never issued
    xid = fake.execute(LOOP, workload={"items": [1, 2]})
    commands = {c["index"]: c for c in fake.claim_next(limit=2, lease_seconds=5)}
    fake.complete(commands[0], ok_=False, error={"kind": "error", "message": "kaboom"})
    assert fake.status(xid)["status"] == "RUNNING"  # index 1 is still in flight
    report = fake.services.reconciler.tick(clock.advance(6))
    assert report.expired == [int(commands[1]["command_id"])]
    status = fake.status(xid)
    assert status["status"] == "FAILED"
    assert status["error"]["reason"] == "step 'each' failed: iteration 0: kaboom"
    assert len(issued(fake, xid)) == 2 and fake.store.open_commands(int(xid)) == []


def test_a_report_committed_after_the_expired_claims_were_read_is_never_declared_lost(
    fake: Api, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33, item 7: the reconciler read the expired claims, the database went away,
    the worker's report landed when it came back, then the stale rows were expired: a
    completed attempt shown LOST. The rows are read again under the run's lock and the
    append checks the claim: nothing is written."""
    xid = fake.execute(HELLO)
    command = fake.claim_one(lease_seconds=5)
    read_before = fake.store.expired_claims(clock.advance(6))  # before the outage
    assert [r.command_id for r in read_before] == [int(command["command_id"])]
    fake.complete(command, {"greeting": "hi"})  # the report, once the database is back
    monkeypatch.setattr(fake.store, "expired_claims", lambda now: read_before)
    report = fake.services.reconciler.tick(clock.advance(1))
    assert (report.expired, report.errors) == ([], 0)
    assert ev.COMMAND_LEASE_EXPIRED not in fake.event_types(xid)
    described = ok(fake.get(f"/api/executions/{xid}/describe"))
    [attempt] = described["steps"]["start"]["attempts"]
    assert attempt["status"] == "COMPLETED"
    assert fake.store.get_command(int(command["command_id"])).status == "completed"
