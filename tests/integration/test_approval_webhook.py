"""The approval webhook on an embedded run of examples/approval.yaml: the request, then
each vote and the grant arrive in commit order, signed; a receiver that hangs or fails
holds up nothing, and gets every event once it recovers. The refund goes out once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.core import state as st
from milepost.core.approval_state import Voter
from milepost.engine import webhooks
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.webhooks import Webhook
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from tests.receiver import Receiver, serve
from tests.shared import wait_for_async

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "approval.yaml"
SECRET = "hook-secret"
ALICE = Voter("user:alice", frozenset())
CAROL = Voter("user:carol", frozenset({"finance"}))


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = SQLiteStore(tmp_path / "approval.db")
    yield s
    s.close()


def kinds(hooks: Receiver) -> list[str]:
    return [r.json["type"] for r in hooks.received]


async def refund_with_votes(
    store: SQLiteStore,
    refunds: Receiver,
    webhook: Webhook,
    *,
    before_decisions: Any = None,
    after_run: Any = None,
) -> tuple[st.ExecutionState, int]:
    """Start the example for 1,800, wait until it asks, vote twice; the run's end state.
    `after_run(engine)` is awaited once the run ended, before the engine stops."""
    text = EXAMPLE.read_text()
    workload = {"refund_api": refunds.url, "amount": 1800}
    async with EmbeddedEngine(store, webhook=webhook) as engine:
        xid = engine.start(load.load_text(text), text, workload)
        [pending] = await wait_for_async(
            lambda: engine.service.approvals(execution_id=xid, status="pending"), "the request"
        )
        if before_decisions is not None:
            await before_decisions()
        engine.service.decide_approval(pending.approval_id, ALICE, "approve", "checked the order")
        assert engine.service.approval(pending.approval_id).status == "pending"  # one of two
        assert refunds.received == []
        engine.service.decide_approval(pending.approval_id, CAROL, "approve", None)
        state = await engine.wait(xid, timeout=60)
        if after_run is not None:
            await after_run(engine)
    return state, pending.approval_id


def test_the_webhook_gets_the_request_then_each_vote_and_the_grant_in_order(
    store: SQLiteStore,
) -> None:
    with serve() as hooks, serve() as refunds:
        webhook = Webhook(url=hooks.url + "/hook", secret=SECRET, backoff=0.05)

        async def requested_first() -> None:
            # the request is delivered while the step waits, before anyone decides
            await wait_for_async(lambda: kinds(hooks) == [ev.APPROVAL_REQUESTED], "the request")

        state, approval_id = asyncio.run(
            refund_with_votes(store, refunds, webhook, before_decisions=requested_first)
        )
        assert state.status == st.COMPLETED, state.error
        # the engine closed the notifier as it stopped: what was queued had left by then
        assert kinds(hooks) == [
            ev.APPROVAL_REQUESTED,
            ev.APPROVAL_DECIDED,
            ev.APPROVAL_DECIDED,
            ev.APPROVAL_GRANTED,
        ]
    assert len(refunds.received) == 1  # two approvals, one refund
    assert refunds.received[0].json["amount"] == 1800
    log = [e for e in store.load(state.execution_id) if e.event_type in ev.APPROVAL_EVENTS]
    assert [r.headers["x-milepost-event-id"] for r in hooks.received] == [
        str(e.event_id) for e in log
    ]  # every approval event of the log, in its order
    for got in hooks.received:
        assert webhooks.verify(SECRET, got.body, got.headers["x-milepost-signature"])
        assert got.json["execution_id"] == str(state.execution_id)
        assert got.json["step"] == "refund"
        assert got.json["payload"]["approval_id"] == str(approval_id)
    request, first, second, granted = (r.json["payload"] for r in hooks.received)
    assert request["quorum"] == 2 and request["risk"] == "high"
    assert request["approvers"] == ["role:finance", "user:alice", "user:bob"]
    assert (first["identity"], first["decision"], first["reason"]) == (
        "user:alice",
        "approve",
        "checked the order",
    )
    assert (second["identity"], second["roles"]) == ("user:carol", ["finance"])
    assert granted["approvers"] == ["user:alice", "user:carol"]
    assert granted["digest"] == request["digest"]


def test_a_webhook_that_hangs_then_fails_holds_up_no_run_and_gets_it_all_when_it_recovers(
    store: SQLiteStore,
) -> None:
    with serve() as hooks, serve() as refunds:
        hooks.statuses = ["hang"] * 1000  # down: every try hangs past the timeout
        webhook = Webhook(
            url=hooks.url + "/hook",
            secret=SECRET,
            timeout=0.3,
            backoff=0.05,
            max_backoff=0.2,
            tries=100,
        )
        seen: dict[str, int] = {}

        async def receiver_down() -> None:
            await wait_for_async(lambda: hooks.received, "the first try, hanging")

        async def recover(engine: EmbeddedEngine) -> None:
            assert engine.webhook is not None
            # the run is over, its refund sent, and not one event has been taken yet
            seen["before"] = engine.webhook.delivered
            hooks.statuses[:] = [500, 500, 503]  # then it answers, badly at first
            hooks.release.set()
            await wait_for_async(
                lambda: engine.webhook is not None and engine.webhook.delivered == 4,
                "all four delivered",
            )
            seen["dropped"] = engine.webhook.dropped

        state, _ = asyncio.run(
            refund_with_votes(
                store, refunds, webhook, before_decisions=receiver_down, after_run=recover
            )
        )
    assert state.status == st.COMPLETED, state.error
    assert len(refunds.received) == 1
    assert seen == {"before": 0, "dropped": 0}
    # every try of an event carries its id: the first time each id shows, in order
    firsts = list(
        dict.fromkeys((r.headers["x-milepost-event-id"], r.json["type"]) for r in hooks.received)
    )
    assert [t for _, t in firsts] == [
        ev.APPROVAL_REQUESTED,
        ev.APPROVAL_DECIDED,
        ev.APPROVAL_DECIDED,
        ev.APPROVAL_GRANTED,
    ]
    assert len(hooks.received) >= 4 + 3  # the three refused tries were tried again


def test_a_vote_cast_by_a_local_milepost_approve_is_sent_by_that_process(tmp_path: Path) -> None:
    # `milepost approve` on a local database appends the vote behind the run's driver: no
    # engine call of the driver commits it, so the approving process sends it itself
    from typer.testing import CliRunner

    from milepost.cli import app
    from milepost.engine.orchestrator import Orchestrator

    db = tmp_path / "local.db"
    text = EXAMPLE.read_text()
    store = SQLiteStore(db)
    try:  # a gated run left waiting (nobody drives it): started, then the refund step asks
        orchestrator = Orchestrator(store, machine_id=7)
        pb = load.load_text(text)
        _, version = orchestrator.register(text, pb)
        xid, outcome = orchestrator.start(pb, version, {"amount": 1800}, started_by="user:dora")
        [command] = [cmd for _, cmd in outcome.issued]
        done = ev.new_event(
            orchestrator.new_id(),
            xid,
            ev.COMMAND_COMPLETED,
            time.time(),
            step="start",
            payload={
                "command_id": command.command_id,
                "run": 1,
                "index": -1,
                "attempt": 1,
                "result": {"order": "A-1042", "amount": 1800},
            },
        )
        orchestrator.process([done])
        [pending] = store.list_approvals(execution_id=xid)
    finally:
        store.close()
    env = {
        "MILEPOST_SERVER_URL": "",
        "MILEPOST_TOKEN": "",
        "MILEPOST_DATABASE_URL": "",
        "MILEPOST_APPROVAL_WEBHOOK_SECRET": SECRET,
    }
    with serve() as hooks:
        env["MILEPOST_APPROVAL_WEBHOOK_URL"] = hooks.url + "/hook"
        voted = CliRunner().invoke(
            app,
            [
                "approve",
                str(pending.approval_id),
                "--db",
                str(db),
                "--user",
                "alice",
                "--reason",
                "ok",
            ],
            env=env,
        )
        assert voted.exit_code == 0, voted.output
        # the command waited for the delivery before it exited
        [got] = hooks.received
    assert got.json["type"] == ev.APPROVAL_DECIDED
    assert got.json["payload"]["identity"] == "user:alice"
    assert got.json["payload"]["approval_id"] == str(pending.approval_id)
    assert webhooks.verify(SECRET, got.body, got.headers["x-milepost-signature"])
    env["MILEPOST_APPROVAL_WEBHOOK_SECRET"] = ""
    refused = CliRunner().invoke(
        app, ["approve", str(pending.approval_id), "--db", str(db), "--user", "bob"], env=env
    )
    assert refused.exit_code == 2 and "MILEPOST_APPROVAL_WEBHOOK_SECRET" in refused.output
    store = SQLiteStore(db)
    try:  # refused before anything was written: alice's vote is the only one
        row = store.get_approval(pending.approval_id)
        assert row is not None and [v["identity"] for v in row.votes] == ["user:alice"]
    finally:
        store.close()
