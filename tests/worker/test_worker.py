"""The HTTP worker's loop against a scripted in-process server, on a fake clock."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from milepost.client import ServerRefused, ServerUnavailable
from milepost.core import logs
from milepost.ids import machine_of, timestamp_of
from milepost.playbook.loop_result import LoopResult
from milepost.tools.base import ToolCall, ToolFailure, ToolResult
from milepost.wire import event_to_wire, work_item_from_wire
from milepost.worker import jobs, machine_ids
from milepost.worker.loop import Worker
from tests.shared import wait_for_async
from tests.worker.fakes import (
    HEARTBEAT,
    LEASE,
    SECRET_PLAYBOOK,
    FakeClient,
    FakeClock,
    FakeTools,
    cancelled,
    command,
    make,
    running,
    settle,
    stale,
)


def run(coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(coro(), 20))


# -- reports -------------------------------------------------------------------------------


def test_the_report_carries_the_lease_epoch_and_the_attempt() -> None:
    async def scenario() -> None:
        worker, client, tools, _ = make()
        client.queue.append(command(101, epoch=7))
        async with running(worker):
            await wait_for_async(lambda: bool(client.reports))
        [event] = client.reported_events()
        assert event["event_type"] == "command.completed"
        assert event["meta"]["epoch"] == 7
        context = event["result"]["context"]
        assert context["epoch"] == 7 and context["command_id"] == 101
        assert context["attempt"] == 1 and context["index"] == -1
        assert context["result"] == {"step": "start", "input": {"key": "key-101-1"}}
        assert event["execution_id"] == "500" and event["parent_event_id"] == "101"
        assert event["worker_id"] == "w-1" and event["event_id"] == "9000000"
        assert tools.calls[0].idempotency_key == "key-101-1"

    run(scenario)


def test_a_report_the_server_did_not_store_because_the_run_ended_is_logged_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        worker, client, _, _ = make()
        client.ignore_reports = True
        client.queue.append(command(104))
        async with running(worker):
            await wait_for_async(lambda: bool(client.reports))
            await settle()

    with caplog.at_level(logging.WARNING, logger="milepost.worker"):
        run(scenario)
    assert "not stored: its run had ended" in caplog.text


def test_a_failed_attempt_is_reported_as_command_failed_with_its_epoch() -> None:
    async def scenario() -> None:
        worker, client, _, _ = make()
        client.queue.append(command(102, epoch=3, path="tests/missing"))
        async with running(worker):
            await wait_for_async(lambda: bool(client.reports))
        [event] = client.reported_events()
        assert event["event_type"] == "command.failed" and event["meta"]["epoch"] == 3
        assert event["result"]["context"]["error"]["kind"] == "playbook"

    run(scenario)


def test_loop_results_are_wrapped_in_LoopResult_again() -> None:
    async def scenario() -> None:
        worker, client, tools, _ = make()
        context = {"workload": {}, "ctx": {}, "iter": {}, "fetch_all": [10, 20, 30]}
        client.queue.append(
            command(103, step="total", context=context, loop_steps={"fetch_all": {"failed": 1}})
        )
        async with running(worker):
            await wait_for_async(lambda: bool(client.reports))
        assert tools.calls[0].input == {"n": 3, "failed": 1}
        assert client.reported_events()[0]["event_type"] == "command.completed"

    run(scenario)


def test_work_item_rebuilds_the_command_with_its_epoch() -> None:
    cmd = command(
        104,
        epoch=9,
        index=2,
        attempt=3,
        context={"a": [1], "b": [2]},
        loop_steps={"a": {"failed": 2}},
    )
    item = work_item_from_wire(cmd)
    assert (item.command_id, item.execution_id, item.index, item.attempt, item.epoch) == (
        104,
        500,
        2,
        3,
        9,
    )
    assert isinstance(item.context["a"], LoopResult) and item.context["a"].failed == 2
    assert not isinstance(item.context["b"], LoopResult)
    assert item.context["ctx"] == {} and item.context["execution_id"] == "500"


def test_wire_event_is_fenced_by_meta_epoch() -> None:
    from milepost.core.work import AttemptResult, report_events

    item = work_item_from_wire(command(105, epoch=4))
    [event] = report_events(item, AttemptResult(ok=True, result=1), 77, 1.0, "w")
    wire = event_to_wire(event, item.epoch, item.command_id)
    assert wire["meta"]["epoch"] == wire["result"]["context"]["epoch"] == 4
    assert wire["event_id"] == "77" and wire["created_at"] == 1.0


def test_a_report_is_retried_while_the_server_is_unreachable() -> None:
    async def scenario() -> None:
        worker, client, _, clock = make()
        client.report_failures = [ServerUnavailable("down"), ServerRefused(503, "internal", "busy")]
        client.queue.append(command(106))
        async with running(worker):
            await clock.run_until(lambda: bool(client.reports))
        assert len(client.reports) == 1
        assert {0.2, 0.4} <= set(clock.sleeps), "report retries back off"

    run(scenario)


def test_a_refused_report_is_not_retried() -> None:
    async def scenario() -> None:
        worker, client, _, _ = make()
        client.report_failures = [ServerRefused(422, "validation_error", "bad")]
        client.queue.append(command(107))
        async with running(worker):
            await wait_for_async(lambda: not worker.jobs and len(client.claim_limits) > 1)
        assert client.reports == []

    run(scenario)


def test_a_report_claims_the_next_command_in_the_same_request() -> None:
    async def scenario() -> None:
        worker, client, tools, clock = make(concurrency=1)
        first, second = tools.gate("key-110-1"), tools.gate("key-111-1")
        client.queue.append(command(110))
        async with running(worker):
            await wait_for_async(lambda: len(tools.calls) == 1)
            client.queue.append(command(111))  # issued while 110 runs
            first.set()
            await wait_for_async(lambda: len(tools.calls) == 2)
            assert client.claim_limits == [1], "111 came with 110's report, not from a poll"
            assert client.report_claims == [1]
            second.set()
            await clock.run_until(lambda: len(client.reported_events()) == 2)
        assert [c.idempotency_key for c in tools.calls] == ["key-110-1", "key-111-1"]

    run(scenario)


@contextlib.asynccontextmanager
async def one_report_held_two_finished(
    worker: Worker, client: FakeClient, tools: FakeTools, base: int
) -> AsyncIterator[None]:
    """Three commands from `base` running on `worker`: the first finishes and its report is
    held at the server (`client.report_gate`) while the other two finish."""
    client.report_gate = asyncio.Event()
    first, rest = tools.gate(f"key-{base}-1"), tools.gate(f"key-{base + 1}-1")
    tools.gates[f"key-{base + 2}-1"] = rest
    client.queue += [command(base), command(base + 1), command(base + 2)]
    async with running(worker):
        await wait_for_async(lambda: len(tools.calls) == 3)
        first.set()
        await wait_for_async(lambda: len(client.report_claims) == 1)
        rest.set()
        await settle()
        yield


def test_attempts_that_finish_while_a_report_is_on_its_way_go_in_one_batch() -> None:
    async def scenario() -> None:
        worker, client, tools, clock = make(concurrency=3)
        async with one_report_held_two_finished(worker, client, tools, 120):
            client.report_gate.set()
            await clock.run_until(lambda: len(client.reported_events()) == 3)
        assert [len(batch) for batch in client.reports] == [1, 2]
        # each report asks for every free slot: the second its own two and the one the
        # first freed (its claim came back empty: nothing was queued)
        assert client.report_claims == [1, 3]

    run(scenario)


def test_a_delivered_report_frees_its_slots_before_the_next_report_claims() -> None:
    # The slots of a report's attempts used to free only once their tasks resumed, after
    # the next report had gone out: that report asked for too few commands, and the claim
    # loop claimed the rest alone. On the server each such claim is a transaction on the
    # run's log (its `command.claimed`) queued with the reports: W2's two workers made a
    # claim alone for every two reports.
    async def scenario() -> None:
        worker, client, tools, clock = make(concurrency=3)
        async with one_report_held_two_finished(worker, client, tools, 130):
            held, client.report_gate = client.report_gate, asyncio.Event()
            held.set()  # the first report comes back empty; the second waits at the server
            await wait_for_async(lambda: len(client.report_claims) == 2)
            await settle()
            assert client.report_claims == [1, 3], "the first report's slot is free too"
            polls = list(client.claim_limits)
            for i in range(3):  # issued meanwhile; they run until the test ends
                client.queue.append(command(140 + i))
                tools.gate(f"key-{140 + i}-1")
            client.report_gate.set()
            await wait_for_async(lambda: len(tools.calls) == 6)
            await settle()
            assert client.claim_limits == polls, "all three came with the report"
            for i in range(3):
                tools.gates[f"key-{140 + i}-1"].set()
            await clock.run_until(lambda: len(client.reported_events()) == 6)

    run(scenario)


def test_a_retried_report_claims_nothing() -> None:
    async def scenario() -> None:
        worker, client, _, clock = make(concurrency=1)
        client.report_failures = [ServerUnavailable("reply lost")]
        client.queue.append(command(130))
        async with running(worker):
            await clock.run_until(lambda: bool(client.reports))
        # the first try may have claimed before its reply was lost: those leases lapse
        assert client.report_claims == [1, None]

    run(scenario)


def test_a_refused_batch_is_sent_again_report_by_report() -> None:
    async def scenario() -> None:
        worker, client, tools, clock = make(concurrency=3)
        async with one_report_held_two_finished(worker, client, tools, 140):
            # the first report goes through; the batch of two is refused, then each alone
            client.report_failures = [None, ServerRefused(422, "validation_error", "one bad event")]
            client.report_gate.set()
            await clock.run_until(lambda: len(client.report_claims) == 4)
            await wait_for_async(lambda: not worker.jobs)
        assert [len(batch) for batch in client.reports] == [1, 1, 1]
        assert len(client.reported_events()) == 3

    run(scenario)


# -- heartbeats and leases -------------------------------------------------------------------


def test_heartbeats_every_third_of_the_lease_while_the_attempt_runs() -> None:
    async def scenario() -> None:
        worker, client, tools, clock = make()
        gate = tools.gate("start")
        client.queue.append(command(201, epoch=5))
        async with running(worker):
            await wait_for_async(lambda: bool(tools.calls))
            await clock.advance(HEARTBEAT - 0.1)
            assert client.heartbeats == []
            await clock.advance(0.2)
            assert client.heartbeats == [(201, 5, "w-1")]
            await clock.advance(HEARTBEAT)
            assert len(client.heartbeats) == 2
            gate.set()
            await wait_for_async(lambda: bool(client.reports))
            await clock.advance(3 * HEARTBEAT)
        assert len(client.heartbeats) == 2, "no heartbeats once the command is reported"
        assert client.reported_events()[0]["meta"]["epoch"] == 5

    run(scenario)


def test_heartbeats_every_third_of_the_lease_the_claim_gave_not_the_one_asked() -> None:
    """The step's `spec.liveness` (3 s) came back as the claim's `lease_seconds`: the worker
    that asked for 30 s heartbeats every second, and by what each heartbeat gave next."""

    async def scenario() -> None:
        worker, client, tools, clock = make()
        gate = tools.gate("start")
        own = command(202, epoch=2)
        own["lease"]["lease_seconds"] = 3.0
        client.queue.append(own)
        client.on_heartbeat = lambda cid, epoch: {
            "lease": {"epoch": epoch, "lease_seconds": 6.0},
            "cancelled": False,
        }
        async with running(worker):
            await wait_for_async(lambda: bool(tools.calls))
            await clock.advance(0.9)
            assert client.heartbeats == []
            await clock.advance(0.2)
            assert client.heartbeats == [(202, 2, "w-1")]
            await clock.advance(1.5)  # the reply said 6 s: the next one comes 2 s after
            assert len(client.heartbeats) == 1
            await clock.advance(0.6)
            assert len(client.heartbeats) == 2
            gate.set()
            await wait_for_async(lambda: bool(client.reports))

    run(scenario)


def test_a_lease_longer_than_the_worker_s_own_still_heartbeats_every_third_of_its_own() -> None:
    """A step's timeout gave its command a 90 s lease; the worker asked for 30 s: it still
    heartbeats every 10 s, so it learns a cancel as soon as for any other step."""

    async def scenario() -> None:
        worker, client, tools, clock = make()
        gate = tools.gate("start")
        long = command(208, epoch=2)
        long["lease"]["lease_seconds"] = 90.0
        client.queue.append(long)
        client.on_heartbeat = lambda cid, epoch: {
            "lease": {"epoch": epoch, "lease_seconds": 90.0},
            "cancelled": False,
        }
        async with running(worker):
            await wait_for_async(lambda: bool(tools.calls))
            await clock.advance(HEARTBEAT + 0.1)
            assert client.heartbeats == [(208, 2, "w-1")]
            await clock.advance(HEARTBEAT)
            assert len(client.heartbeats) == 2
            gate.set()
            await wait_for_async(lambda: bool(client.reports))

    run(scenario)


def test_a_stale_heartbeat_abandons_the_attempt_and_never_reports_it() -> None:
    async def scenario() -> None:
        worker, client, tools, clock = make()
        tools.gate("start")  # never opened
        client.on_heartbeat = stale
        client.queue.append(command(202, epoch=2))
        async with running(worker):
            await wait_for_async(lambda: bool(tools.calls))
            await clock.advance(HEARTBEAT)
            await wait_for_async(lambda: not worker.jobs)
            assert tools.cancelled == ["key-202-1"]
            await clock.advance(LEASE)
        assert client.reports == [] and client.releases == []

    run(scenario)


def test_a_cancelled_execution_has_its_attempt_stopped_and_gets_no_more_claims() -> None:
    async def scenario() -> None:
        worker, client, tools, clock = make()
        gate = tools.gate("start")
        client.on_heartbeat = cancelled
        client.queue.append(command(203, execution_id=600))
        async with running(worker):
            await wait_for_async(lambda: bool(tools.calls))
            await clock.advance(HEARTBEAT)
            gate.set()
            await wait_for_async(lambda: bool(client.reports))
            client.queue += [command(204, execution_id=600), command(205, execution_id=700)]
            worker.notify()
            await wait_for_async(lambda: len(client.reports) == 2)
        assert [e["result"]["context"]["command_id"] for e in client.reported_events()] == [
            203,
            205,
        ]
        stopped = client.reported_events()[0]
        assert stopped["event_type"] == "command.failed"
        assert stopped["result"]["context"]["error"]["kind"] == "cancelled"
        assert client.releases == [(204, 1)]

    run(scenario)


def test_a_cancel_announced_for_its_run_makes_an_attempt_heartbeat_now_and_stop() -> None:
    """The announcement (NATS) is only a hint: the heartbeat it brings forward, not the
    announcement, says the run is cancelled; another run's attempt goes on."""

    async def scenario() -> None:
        worker, client, tools, clock = make()
        tools.gate("start")  # never opened: only the stop ends it
        client.on_heartbeat = lambda cid, epoch: {
            "lease": {"epoch": epoch},
            "cancelled": cid == 207,
        }
        client.queue.append(command(207, execution_id=602))
        async with running(worker):
            await wait_for_async(lambda: bool(tools.calls))
            assert client.heartbeats == []
            jobs.cancel_announced(worker.jobs.values(), {"execution_ids": ["999"]})
            jobs.cancel_announced(worker.jobs.values(), {"execution_ids": ["602"]})
            await wait_for_async(lambda: bool(client.reports))  # no time passed on the clock
        assert [h[0] for h in client.heartbeats] == [207]
        [stopped] = client.reported_events()
        assert stopped["result"]["context"]["error"]["kind"] == "cancelled"

    run(scenario)


def test_a_cancel_announced_while_a_heartbeat_is_on_its_way_brings_the_next_one_forward() -> None:
    """The announcement may come while a heartbeat (of the interval) is in flight: that one
    predates the cancel, so the next goes at once, not an interval later."""

    async def scenario() -> None:
        worker, client, tools, clock = make()
        tools.gate("start")  # never opened: only the stop ends it
        in_flight: list[int] = []

        def heartbeat(cid: int, epoch: int) -> dict[str, Any]:
            if not in_flight:  # the first heartbeat: the cancel is announced meanwhile
                in_flight.append(cid)
                jobs.cancel_announced(worker.jobs.values(), {"execution_ids": ["603"]})
                return {"lease": {"epoch": epoch}, "cancelled": False}
            return {"lease": {"epoch": epoch}, "cancelled": True}

        client.on_heartbeat = heartbeat
        client.queue.append(command(208, execution_id=603))
        async with running(worker):
            await wait_for_async(lambda: bool(tools.calls))
            await clock.advance(HEARTBEAT + 0.1)  # the interval's heartbeat
            await wait_for_async(lambda: bool(client.reports))  # no more time on the clock
        assert [h[0] for h in client.heartbeats] == [208, 208]
        [stopped] = client.reported_events()
        assert stopped["result"]["context"]["error"]["kind"] == "cancelled"

    run(scenario)


def test_a_compensation_of_a_cancelled_execution_is_run_not_given_back() -> None:
    """After the cancel the server hands out only that run's compensations (DSL 10.5)."""

    async def scenario() -> None:
        worker, client, tools, clock = make()
        gate = tools.gate("start")
        client.on_heartbeat = cancelled
        client.queue.append(command(206, execution_id=601))
        async with running(worker):
            await wait_for_async(lambda: bool(tools.calls))
            await clock.advance(HEARTBEAT)  # cancelled: 206 is stopped
            await wait_for_async(lambda: bool(client.reports))
            gate.set()
            undo = {
                "workload": {},
                "ctx": {},
                "iter": {},
                "execution_id": "601",
                "compensation": {"step": "start", "run": 1, "result": None},
            }
            client.queue.append(command(207, execution_id=601, context=undo))
            worker.notify()
            await wait_for_async(lambda: len(client.reports) == 2)
        assert [e["result"]["context"]["command_id"] for e in client.reported_events()] == [
            206,
            207,
        ]
        assert client.releases == []

    run(scenario)


# -- claiming ------------------------------------------------------------------------------


def test_claims_ask_only_for_free_slots() -> None:
    async def scenario() -> None:
        worker, client, tools, clock = make(concurrency=2)
        gate = tools.gate("start")
        client.queue += [command(300 + i) for i in range(5)]
        async with running(worker):
            await wait_for_async(lambda: len(tools.calls) == 2)
            await clock.advance(60)  # polls would happen now if slots were free
            assert client.claim_limits == [2]
            gate.set()
            await clock.run_until(lambda: len(client.reported_events()) == 5)
        # the rest came with the reports, each asking only for the slots it freed
        assert client.claim_limits[0] == 2
        assert max(client.claim_limits) <= 2
        assert max(limit or 0 for limit in client.report_claims) <= 2

    run(scenario)


def test_poll_backoff_doubles_to_two_seconds_and_resets_when_work_arrives() -> None:
    async def scenario() -> None:
        worker, client, _, clock = make()
        async with running(worker):
            for _ in range(8):
                await clock.next()
            assert clock.sleeps[:8] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
            assert worker.polls == 9
            client.queue.append(command(310))
            mark = len(clock.sleeps)
            await clock.next()  # the 2 s wait ends: this poll finds the command
            await wait_for_async(lambda: bool(client.reports))
            for _ in range(3):
                await clock.next()
        polls = [s for s in clock.sleeps[mark:] if s != HEARTBEAT]
        assert polls[0] == 0.05, "work resets the back-off"
        # the report asked for more work and got none: no extra poll, the back-off goes on
        assert polls[-3:] == [0.05, 0.1, 0.2], polls

    run(scenario)


def test_notify_wakes_a_waiting_worker_before_its_poll_interval() -> None:
    async def scenario() -> None:
        worker, client, tools, clock = make(min_poll=60.0, max_poll=60.0)
        gate = tools.gate("start")
        async with running(worker):
            await wait_for_async(
                lambda: 60.0 in clock.pending(), "the worker to wait out its poll interval"
            )
            assert worker.polls == 1
            client.queue.append(command(320))
            worker.notify({"command_id": "320", "execution_id": "500"})
            await wait_for_async(lambda: bool(tools.calls))
            assert worker.polls == 2
            gate.set()
            await wait_for_async(lambda: bool(client.reports))

    run(scenario)


def test_a_failing_claim_backs_off_and_recovers() -> None:
    async def scenario() -> None:
        class Flaky(FakeClient):
            fail = 3

            async def claim_next(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
                if self.fail:
                    self.fail -= 1
                    raise ServerUnavailable("down")
                return await super().claim_next(*args, **kwargs)

        worker, client, _, clock = make(Flaky())
        client.queue.append(command(330))
        async with running(worker):
            await clock.run_until(lambda: bool(client.reports))
        assert clock.sleeps[:3] == [0.05, 0.1, 0.2]

    run(scenario)


def test_the_playbook_is_fetched_once_per_version() -> None:
    async def scenario() -> None:
        worker, client, _, _ = make()
        client.queue += [command(340), command(341), command(342)]
        async with running(worker):
            await wait_for_async(lambda: len(client.reported_events()) == 3)
        assert client.resources == [("tests/w", 1)]

    run(scenario)


def test_credentials_come_from_the_server_are_cached_and_never_leave_the_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "hunter2-secret-value"

    async def scenario() -> None:
        client = FakeClient({("tests/s", 1): SECRET_PLAYBOOK})
        client.credentials["pg_main"] = {"user": "app", "password": secret}
        worker, client, tools, _ = make(client)
        client.queue += [command(350, path="tests/s"), command(351, path="tests/s")]
        async with running(worker):
            await wait_for_async(lambda: len(client.reported_events()) == 2)
        assert tools.calls[0].input == {"pw": secret}  # the tool sees it...
        assert secret not in repr(client.reports)  # ...the report does not
        assert client.reported_events()[0]["result"]["context"]["result"]["input"]["pw"] == "***"
        assert client.credential_calls == ["pg_main"]

    with caplog.at_level(logging.DEBUG):
        run(scenario)
    assert secret not in caplog.text


def test_a_missing_credential_fails_the_attempt() -> None:
    async def scenario() -> None:
        worker, client, _, _ = make(FakeClient({("tests/s", 1): SECRET_PLAYBOOK}))
        client.queue.append(command(360, path="tests/s"))
        async with running(worker):
            await wait_for_async(lambda: bool(client.reports))
        [event] = client.reported_events()
        assert event["event_type"] == "command.failed"
        assert event["result"]["context"]["error"]["kind"] == "keychain"

    run(scenario)


# -- shutdown ------------------------------------------------------------------------------


def test_stop_releases_unstarted_claims_and_finishes_running_attempts() -> None:
    async def scenario() -> None:
        client = FakeClient({("tests/w", 1): fakes_playbook(), ("tests/slow", 1): fakes_playbook()})
        worker, client, tools, clock = make(client)
        gate = tools.gate("start")
        client.queue.append(command(401, epoch=3))
        task = asyncio.create_task(worker.run())
        await wait_for_async(lambda: bool(tools.calls))  # 401 is running
        client.resource_gate = asyncio.Event()  # the next playbook fetch hangs
        client.queue.append(command(402, epoch=4, path="tests/slow"))
        worker.notify()
        await wait_for_async(lambda: 402 in worker.jobs)
        polls = worker.polls
        worker.stop()
        await settle()
        assert client.releases == [(402, 4)]
        assert not task.done(), "401 is still running"
        await clock.advance(2.0)  # well inside the grace
        gate.set()
        await asyncio.wait_for(task, 5)
        assert [e["result"]["context"]["command_id"] for e in client.reported_events()] == [401]
        assert worker.polls == polls, "no claims after stop"

    run(scenario)


def test_after_the_grace_running_attempts_are_cancelled_unreported() -> None:
    async def scenario() -> None:
        worker, client, tools, clock = make(grace_seconds=5.0)
        tools.gate("start")  # never opened
        client.queue.append(command(410))
        task = asyncio.create_task(worker.run())
        await wait_for_async(lambda: bool(tools.calls))
        worker.stop()
        await clock.advance(4.9)
        assert not task.done()
        await clock.advance(0.2)
        await asyncio.wait_for(task, 5)
        assert client.reports == [] and client.releases == []
        assert tools.cancelled == ["key-410-1"]

    run(scenario)


def test_commands_claimed_while_stopping_are_given_back() -> None:
    async def scenario() -> None:
        class SlowClaim(FakeClient):
            gate = asyncio.Event()

            async def claim_next(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
                await self.gate.wait()
                return await super().claim_next(*args, **kwargs)

        worker, client, tools, _ = make(SlowClaim())
        client.queue.append(command(420, epoch=6))
        task = asyncio.create_task(worker.run())
        await settle()
        worker.stop()
        SlowClaim.gate.set()
        await asyncio.wait_for(task, 5)
        assert client.releases == [(420, 6)] and tools.calls == []

    run(scenario)


def test_machine_id_comes_from_the_environment_or_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MILEPOST_MACHINE_ID", "17")
    assert machine_ids.machine_id() == 17
    monkeypatch.delenv("MILEPOST_MACHINE_ID")
    assert machine_ids.machine_id() is None  # leased from the server: no host:pid hash


def _machine_of(event_id: str) -> int:
    return machine_of(int(event_id))


def test_a_worker_mints_with_a_machine_id_leased_from_its_server_and_renews_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MILEPOST_MACHINE_ID", raising=False)

    async def scenario() -> None:
        client, tools, clock = FakeClient(), FakeTools(), FakeClock()
        worker = Worker(client, tools, clock=clock, worker_id="w-lease", lease_seconds=LEASE)
        client.queue.append(command(130))
        async with running(worker):
            await clock.run_until(lambda: len(client.reports) == 1)
            assert client.machine_id_calls == [None]
            assert {_machine_of(e["event_id"]) for e in client.reports[0]} == {7}
            await clock.advance(worker.ids.every)
            assert client.machine_id_calls == [None, 7]  # renewed, same id
            client.machine_ids_lost.add(7)  # it lapsed and another process has it now
            await clock.advance(worker.ids.every)
            assert client.machine_id_calls == [None, 7, 7]
            client.queue.append(command(131))
            await clock.run_until(lambda: len(client.reports) == 2)
        assert {_machine_of(e["event_id"]) for e in client.reports[1]} == {8}

    run(scenario)


def test_a_worker_on_a_fixed_machine_id_still_holds_a_lease_to_be_seen_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its pool is live while its lease is (`engine.worker_pools`); its ids stay on 17,
    and a refused presence is only logged."""
    monkeypatch.setenv("MILEPOST_MACHINE_ID", "17")

    async def scenario() -> None:
        client, tools, clock = FakeClient(), FakeTools(), FakeClock()
        client.machine_id_failures = [ServerRefused(503, "unavailable", "busy")]
        client.machine_ids_lost = {17}  # another process holds 17
        worker = Worker(
            client, tools, clock=clock, worker_id="w-fixed", lease_seconds=LEASE, pool="gpu"
        )
        client.queue.append(command(140))
        async with running(worker):
            await clock.run_until(lambda: len(client.reports) == 1)
            # it asks for 17 itself: the server then takes its reports on 17 as its own
            assert client.machine_id_calls == [17]  # refused: minting went on
            assert {_machine_of(e["event_id"]) for e in client.reports[0]} == {17}
            await clock.advance(worker.ids.every)  # a renewal is also its check-in
            assert client.machine_id_calls == [17, 17]  # 17 is taken here: leased 7
            await clock.advance(worker.ids.every)
            assert client.machine_id_calls == [17, 17, 7]  # and renewed
            assert client.machine_id_pools[-1] == "gpu"
            client.queue.append(command(141))
            await clock.run_until(lambda: len(client.reports) == 2)
        assert {_machine_of(e["event_id"]) for e in client.reports[1]} == {17}, "never the lease's"

    run(scenario)


def _leasing(client: FakeClient) -> tuple[Worker, FakeClock]:
    clock = FakeClock()
    return Worker(client, FakeTools(), clock=clock, worker_id="w-lease", lease_seconds=LEASE), clock


@pytest.mark.parametrize(("status", "code"), [(404, "not_found"), (422, "validation_error")])
def test_a_machine_id_refused_for_good_fails_the_worker_at_once(
    status: int, code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MILEPOST_MACHINE_ID", raising=False)

    async def scenario() -> None:
        client = FakeClient()
        client.machine_id_failures = [ServerRefused(status, code, "no")]
        worker, _ = _leasing(client)
        with pytest.raises(machine_ids.MachineIdRefused) as raised:
            await worker.run()
        assert raised.value.code == "machine_id_refused"
        assert f"HTTP {status} {code}" in raised.value.message
        assert client.machine_id_calls == [None] and client.claim_limits == []

    run(scenario)


def test_a_machine_id_lease_retries_what_may_pass_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("MILEPOST_MACHINE_ID", raising=False)

    async def scenario() -> None:
        client = FakeClient()
        client.machine_id_failures = [
            ServerUnavailable("down"),
            ServerRefused(503, "busy", "later"),
            {"unexpected": "reply"},
        ]
        worker, clock = _leasing(client)
        client.queue.append(command(133))
        async with running(worker):
            await clock.run_until(lambda: len(client.reports) == 1)
        assert client.machine_id_calls == [None, None, None, None]

    with caplog.at_level(logging.DEBUG, logger="milepost.worker"):
        run(scenario)
    warnings = [
        r
        for r in caplog.records
        if getattr(r, "action", "") == "machine_id_failed" and r.levelno >= logging.WARNING
    ]
    assert len(warnings) == 1


def test_the_machine_id_renewer_outlives_a_malformed_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MILEPOST_MACHINE_ID", raising=False)

    async def scenario() -> None:
        client = FakeClient()
        worker, clock = _leasing(client)
        async with running(worker):
            await clock.run_until(lambda: client.machine_id_calls == [None])
            client.machine_id_failures = [{"machine_id": "seven"}, RuntimeError("bug")]
            for _ in range(3):
                await clock.advance(worker.ids.every)
            assert client.machine_id_calls == [None, 7, 7, 7]  # still renewing

    run(scenario)


def test_ids_are_minted_on_the_servers_clock_measured_from_the_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MILEPOST_MACHINE_ID", raising=False)

    async def scenario() -> None:
        client = FakeClient()
        worker, clock = _leasing(client)
        client.server_clock = lambda: clock.time() - 3600.0  # this machine is an hour ahead
        client.queue.append(command(134))
        async with running(worker):
            await clock.run_until(lambda: len(client.reports) == 1)
        minted = {timestamp_of(int(e["event_id"])) for e in client.reports[0]}
        assert all(abs(at - (clock.time() - 3600.0)) < 1.0 for at in minted), minted

    run(scenario)


def test_a_report_refused_for_another_field_is_not_sent_again() -> None:
    async def scenario() -> None:
        worker, client, _, _ = make()
        bad = ServerRefused(
            422, "validation_error", "bad", errors=[{"loc": ["body", "events", 0, "step"]}]
        )
        client.report_failures = [bad]
        client.queue.append(command(134))
        async with running(worker):
            await wait_for_async(lambda: not worker.jobs and len(client.report_claims) == 1)
            await settle()
        assert len(client.report_claims) == 1 and client.reports == []

    run(scenario)


def test_a_report_refused_for_an_event_id_conflict_is_sent_once_more_under_new_ids() -> None:
    async def scenario() -> None:
        worker, client, _, _ = make()
        conflict = ServerRefused(409, "event_id_conflict", "taken")
        client.report_failures = [conflict, conflict]
        client.queue.append(command(132))
        async with running(worker):
            await wait_for_async(lambda: not worker.jobs and len(client.report_claims) == 2)
            await settle()
        assert len(client.report_claims) == 2  # once more, then given up: no loop
        assert client.reports == []

    run(scenario)


NOT_ITS_OWN = ServerRefused(
    422,
    "validation_error",
    "body.events.0.event_id: not your machine id",
    errors=[{"loc": ["body", "events", 0, "event_id"], "msg": "not one your token leased"}],
)
"""Its lease lapsed while the server was away and another process took the machine id:
the ids minted on it are no longer the worker's (`engine.id_spaces`)."""


@pytest.mark.parametrize(
    "refusal",
    [ServerRefused(409, "event_id_conflict", "taken"), NOT_ITS_OWN],
    ids=["taken", "not its own"],
)
def test_a_report_whose_ids_were_taken_goes_through_under_new_ids(
    refusal: ServerRefused,
) -> None:
    async def scenario() -> None:
        worker, client, _, _ = make()
        client.report_failures = [refusal]
        client.queue.append(command(133))
        async with running(worker):
            await wait_for_async(lambda: len(client.reports) == 1)
        [[event]] = client.reports
        assert event["event_id"] == "9000001"  # not 9000000, the id refused

    run(scenario)


def fakes_playbook() -> str:
    from tests.worker.fakes import PLAYBOOK

    return PLAYBOOK


# -- a task policy's retry (issue 33, item 12) ---------------------------------------------

POLICY_PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: p, path: tests/p}
workflow:
  - step: start
    tool:
      kind: python
      code: "raise ValueError('boom')"
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: retry, attempts: 2, delay: 600}
"""


class FailingTools(FakeTools):
    """Every call fails, printing a traceback."""

    async def run(self, call: ToolCall) -> ToolResult:
        self.calls.append(call)
        trace = f"Traceback: boom {len(self.calls)}\n"
        return ToolResult(
            data=None,
            error=ToolFailure("exception", "ValueError: boom"),
            logs=(logs.Captured(logs.TRACEBACK, trace),),
        )


def test_a_policy_retry_is_reported_before_its_wait_and_keeps_the_attempt_s_slot() -> None:
    async def scenario() -> None:
        client = FakeClient({("tests/p", 1): POLICY_PLAYBOOK})
        worker, client, tools, clock = make(client, FailingTools())
        client.queue.append(command(101, epoch=3, path="tests/p"))
        async with running(worker):
            await wait_for_async(lambda: bool(client.reports))
            [note] = client.reported_events()
            context = note["result"]["context"]
            assert (note["event_type"], note["meta"]["epoch"], context["command_id"]) == (
                "call.error",
                3,
                101,
            )
            assert context["retry"] == {
                "attempt": 2,
                "attempts": 2,
                "not_before": pytest.approx(clock.time() + 600),
            }
            assert context["error"]["message"] == "ValueError: boom"
            assert note["logs"] == [
                {"stream": "traceback", "text": "Traceback: boom 1\n", "cut": 0}
            ]
            assert 101 in worker.jobs  # the attempt runs on: its slot stays taken
            # the policy's wait ends (the clock moves from sleeper to sleeper: heartbeats,
            # then the wait): the task fails again, the retries are spent
            await wait_for_async(lambda: len(client.reported_events()) == 2, between=clock.next)
        report = client.reported_events()[1]
        assert report["event_type"] == "command.failed"
        assert report["result"]["context"]["attempt"] == 1  # one attempt, one command
        # the report carries what the note did not: the second execution's traceback only
        assert report["logs"] == [{"stream": "traceback", "text": "Traceback: boom 2\n", "cut": 0}]
        assert [c.idempotency_key for c in tools.calls] == ["key-101-1", "key-101-1"]

    run(scenario)
