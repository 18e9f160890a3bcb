"""A worker whose token the server refuses ends at once, naming the setting, whenever the
refusal comes: its machine-id lease, a claim, a heartbeat, a renewal. Its check-in names
it in the workers registry."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest

from milepost import __version__
from milepost.client import ServerRefused
from milepost.worker.loop import Worker
from milepost.worker.token import TokenRefused
from tests.shared import wait_for_async
from tests.worker.fakes import HEARTBEAT, LEASE, FakeClient, FakeClock, FakeTools, command, make

UNAUTHORIZED = ServerRefused(401, "unauthorized", "unknown or revoked token")
FORBIDDEN = ServerRefused(403, "forbidden", "role 'viewer' may not claim commands")


def run(scenario: Any) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 20))


def _assert_names_the_setting(refused: TokenRefused, status: int) -> None:
    assert refused.code == "token_refused" and refused.fields["status"] == status
    assert "MILEPOST_TOKEN" in refused.message and "--role worker" in refused.message


def _leasing(client: FakeClient) -> tuple[Worker, FakeClock]:
    clock = FakeClock()
    return Worker(client, FakeTools(), clock=clock, worker_id="w-tok", lease_seconds=LEASE), clock


@pytest.mark.parametrize("refusal", [UNAUTHORIZED, FORBIDDEN])
def test_a_token_refused_at_the_lease_ends_the_worker_before_any_claim(
    refusal: ServerRefused, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MILEPOST_MACHINE_ID", raising=False)

    async def scenario() -> None:
        client = FakeClient()
        client.machine_id_failures = [refusal]
        worker, _ = _leasing(client)
        with pytest.raises(TokenRefused) as raised:
            await worker.run()
        _assert_names_the_setting(raised.value, refusal.status)
        assert client.machine_id_calls == [None] and client.claim_limits == []

    run(scenario)


def test_a_token_refused_at_a_claim_ends_the_worker_without_retrying() -> None:
    async def scenario() -> None:
        worker, client, _, _ = make()  # a fixed machine id: no lease, the claim is first
        client.claim_failures = [UNAUTHORIZED, UNAUTHORIZED]
        with pytest.raises(TokenRefused) as raised:
            await asyncio.wait_for(worker.run(), 5)
        _assert_names_the_setting(raised.value, 401)
        assert client.claim_limits == [4]  # once: no retry

    run(scenario)


def test_a_token_revoked_while_full_is_seen_by_a_heartbeat_and_ends_the_worker() -> None:
    async def scenario() -> None:
        worker, client, tools, clock = make(concurrency=1)
        tools.gate("start")  # the attempt never ends: only heartbeats talk to the server

        def revoked(command_id: int, epoch: int) -> dict[str, Any]:
            raise FORBIDDEN

        client.on_heartbeat = revoked
        client.queue.append(command(301))
        task = asyncio.create_task(worker.run())
        await wait_for_async(lambda: bool(tools.calls))
        await clock.advance(HEARTBEAT + 0.1)
        with pytest.raises(TokenRefused) as raised:
            await asyncio.wait_for(task, 5)
        _assert_names_the_setting(raised.value, 403)
        assert client.reports == []  # the attempt was abandoned: its lease recovers it

    run(scenario)


def test_a_token_revoked_before_a_renewal_ends_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MILEPOST_MACHINE_ID", raising=False)

    async def scenario() -> None:
        client = FakeClient()
        worker, clock = _leasing(client)
        task = asyncio.create_task(worker.run())
        await wait_for_async(lambda: client.machine_id_calls == [None])
        client.machine_id_failures = [UNAUTHORIZED]
        await clock.advance(worker.ids.every)
        with pytest.raises(TokenRefused):
            await asyncio.wait_for(task, 5)
        assert client.machine_id_calls == [None, 7]

    run(scenario)


def test_a_refusal_of_one_request_is_not_a_refused_token() -> None:
    async def scenario() -> None:
        worker, client, _, clock = make()
        client.claim_failures = [
            ServerRefused(403, "not_your_command", "no"),
            ServerRefused(400, "bad_request", "no"),
        ]
        task = asyncio.create_task(worker.run())
        await wait_for_async(lambda: len(client.claim_limits) >= 1)
        await clock.advance(5.0)
        await wait_for_async(lambda: len(client.claim_limits) >= 3)  # it went on claiming
        worker.stop()
        await asyncio.wait_for(task, 5)
        assert worker.token.refused is None

    run(scenario)


def test_each_lease_and_renewal_checks_the_worker_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MILEPOST_MACHINE_ID", raising=False)

    async def scenario() -> None:
        client = FakeClient()
        worker, clock = _leasing(client)
        task = asyncio.create_task(worker.run())
        await wait_for_async(lambda: len(client.check_ins) == 1)
        await clock.advance(worker.ids.every)
        await wait_for_async(lambda: len(client.check_ins) == 2)
        worker.stop()
        await asyncio.wait_for(task, 5)
        assert (
            client.check_ins[0]
            == client.check_ins[1]
            == {
                "name": "w-tok",
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "version": __version__,
                "ttl": LEASE,
            }
        )
        assert worker.ids.every == LEASE / 3  # lost after its lease: checked in thrice in one

    run(scenario)


def test_a_clean_stop_gives_the_machine_id_back_and_leaves_the_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MILEPOST_MACHINE_ID", raising=False)

    async def scenario() -> None:
        client = FakeClient()
        worker, _ = _leasing(client)
        task = asyncio.create_task(worker.run())
        await wait_for_async(lambda: client.machine_id_calls == [None])
        worker.stop()
        await asyncio.wait_for(task, 5)
        assert client.machine_id_releases == [7]

    run(scenario)
