"""NATS wake-ups against a real NATS server (MILEPOST_TEST_NATS_URL, default localhost).

Skipped when NATS is unreachable, except under CI, where that is a failure.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

import nats
import pytest
from nats.js.errors import NotFoundError

from milepost.worker.loop import Worker
from milepost.worker.nats_wakeup import NatsWakeup, parse_notice, subject
from tests.shared import require_nats, wait_for_async
from tests.worker.fakes import FakeClient, FakeClock, FakeTools, command


@pytest.fixture(scope="module")
def nats_url() -> str:
    return require_nats()


def test_a_jetstream_notice_wakes_a_waiting_worker_before_its_poll_interval(nats_url: str) -> None:
    pool = f"test-{uuid.uuid4().hex[:12]}"
    stream = f"MILEPOST_TEST_{pool.replace('-', '_').upper()}"

    async def scenario() -> None:
        client, tools, clock = FakeClient(), FakeTools(), FakeClock()
        # polls are 60 s apart on a clock that only the test moves: only a notice can
        # cause a second poll
        worker = Worker(
            client, tools, worker_id="w-nats", min_poll=60.0, max_poll=60.0, clock=clock
        )
        wakeup = NatsWakeup(nats_url, pool, worker.notify)
        wakeup.start()
        await asyncio.wait_for(wakeup.connected.wait(), 10)
        task = asyncio.create_task(worker.run())
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        created = False
        try:
            try:  # the server's stream (milepost.commands.>) may already capture the subject
                await js.find_stream_name_by_subject(subject(pool))
            except NotFoundError:
                await js.add_stream(name=stream, subjects=[subject(pool)])
                created = True
            await wait_for_async(
                lambda: worker.polls == 1 and 60.0 in clock.pending(),
                "the worker to wait out its poll interval",
            )
            client.queue.append(command(801))
            notice = {"command_id": "801", "execution_id": "500"}
            await js.publish(subject(pool), json.dumps(notice).encode())
            await wait_for_async(lambda: bool(client.reports), "the woken worker's report")
            assert worker.polls >= 2 and wakeup.notices == 1
            assert client.reported_events()[0]["result"]["context"]["command_id"] == 801
        finally:
            worker.kill()
            await asyncio.wait_for(task, 10)
            await wakeup.close()
            if created:
                await js.delete_stream(stream)
            await nc.close()

    asyncio.run(scenario())


def test_notices_on_another_pool_do_not_wake_the_worker(nats_url: str) -> None:
    pool = f"test-{uuid.uuid4().hex[:12]}"

    async def scenario() -> None:
        woken: list[dict[str, object]] = []
        wakeup = NatsWakeup(nats_url, pool, woken.append)
        wakeup.start()
        await asyncio.wait_for(wakeup.connected.wait(), 10)
        nc = await nats.connect(nats_url)
        try:
            await nc.publish(subject(pool + "-other"), b"{}")
            await nc.publish(subject(pool), b"not json")
            # one connection's messages arrive in order: once the last one is in, the
            # other pool's notice, published first, would have been too
            await nc.publish(subject(pool), b'{"command_id": "last"}')
            await nc.flush()
            await wait_for_async(lambda: len(woken) == 2, "the two notices of this pool")
            assert woken == [{}, {"command_id": "last"}]
        finally:
            await wakeup.close()
            await nc.close()

    asyncio.run(scenario())


def test_an_unreachable_nats_leaves_the_worker_polling(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        wakeup = NatsWakeup("nats://127.0.0.1:1", "default", lambda notice: None)
        wakeup.start()
        await wait_for_async(lambda: "polling only" in caplog.text, "the fallback warning")
        assert not wakeup.connected.is_set()
        await wakeup.close()

    with caplog.at_level(logging.WARNING, logger="milepost.worker.nats_wakeup"):
        asyncio.run(scenario())
    assert caplog.text.count("NATS unreachable") == 1


def test_parse_notice() -> None:
    assert parse_notice(b'{"command_id": "1"}') == {"command_id": "1"}
    assert parse_notice(b"[1]") == {} and parse_notice(b"\xff") == {}
