"""Approval gates in the embedded mode (DSL 10.3), on SQLite and PostgreSQL: an
`EmbeddedEngine` drives the run, votes go through `Lifecycle.decide_approval` (the engine
checks them) or, from a process that does not drive the run, `engine.approvals.
append_decision` (the vote alone). The gated step POSTs to a local HTTP API
(`tests.approval_world.Upstream`), so whether and how often the tool ran is read outside
the engine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from milepost.core import approval_state as ap
from milepost.core import events as ev
from milepost.core import state as st
from milepost.core.approval_state import Voter
from milepost.core.approvals import (
    AlreadyVoted,
    ApprovalClosed,
    ApprovalNotFound,
    NotAnApprover,
    SelfApproval,
)
from milepost.engine.approvals import append_decision
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.machine import LeasedIds, holder_name
from milepost.engine.orchestrator import Orchestrator
from milepost.playbook import load
from milepost.store import port
from milepost.store.port import StoreUnavailable
from tests import approval_world as world
from tests.approval_world import Upstream
from tests.integration import stores
from tests.pg import PgDatabases, session_databases
from tests.shared import wait_for, wait_for_async

T = TypeVar("T")

ALICE = Voter("user:alice", frozenset({"approver"}))
BOB = Voter("user:bob", frozenset({"approver"}))
CAROL = Voter("user:carol", frozenset({"approver"}))
DORA = Voter("user:dora", frozenset({"admin"}))
"""Starts the runs (`started_by`)."""


@pytest.fixture(scope="module")
def pg() -> Iterator[PgDatabases]:
    yield from session_databases("milepost_appr_emb")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[port.Store]:
    yield from stores.either(request, tmp_path / "engine.db", max_size=4)


@pytest.fixture(scope="module")
def api() -> Iterator[Upstream]:
    with world.upstream() as server:
        yield server


def run(body: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(body())


class Gate:
    """One engine on the test's store, and what the tests ask of it."""

    def __init__(self, engine: EmbeddedEngine) -> None:
        self.engine = engine
        self.store = engine.store

    def start(
        self, text: str, workload: dict[str, Any] | None = None, by: str = DORA.identity
    ) -> int:
        return self.engine.start(load.load_text(text), text, workload, started_by=by)

    async def pending(self, xid: int) -> port.ApprovalRow:
        rows = await wait_for_async(
            lambda: self.store.list_approvals(execution_id=xid),
            f"the approval request of execution {xid}",
        )
        [row] = rows
        assert row.status == ap.PENDING
        return row

    def vote(
        self,
        row: port.ApprovalRow,
        voter: Voter,
        decision: str = "approve",
        reason: str | None = None,
    ) -> port.ApprovalRow:
        return self.engine.service.decide_approval(row.approval_id, voter, decision, reason)

    async def ended(self, xid: int) -> st.ExecutionState:
        return await self.engine.wait(xid, timeout=20)


def issued(store: port.Store, xid: int, step: str = "pay") -> int:
    return sum(1 for e in store.load(xid) if e.event_type == ev.COMMAND_ISSUED and e.step == step)


def types(store: port.Store, xid: int) -> list[str]:
    return [e.event_type for e in store.load(xid)]


def unique(name: str) -> str:
    """A path of the upstream per test and database (the upstream is the module's)."""
    return f"/{name}/{time.monotonic_ns()}"


# -- approve, deny, quorum -------------------------------------------------------------------


def test_an_approved_step_runs_once(store: port.Store, api: Upstream) -> None:
    path = unique("approve")

    async def go() -> tuple[int, st.ExecutionState]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            gate = Gate(engine)
            xid = gate.start(world.gated("tests/approve", api.url + path))
            row = await gate.pending(xid)
            assert row.started_by == DORA.identity and row.quorum == 1
            assert row.request["calls"][0]["input"]["tasks"][0]["config"]["json"] == {
                "amount": 7200
            }
            assert api.count(path) == 0 and issued(store, xid) == 0
            assert gate.vote(row, ALICE, reason="invoice checked").status == ap.GRANTED
            return xid, await gate.ended(xid)

    xid, state = run(go)
    assert state.status == st.COMPLETED, state.error
    assert api.count(path) == 1 and issued(store, xid) == 1
    events = store.load(xid)
    granted = next(e for e in events if e.event_type == ev.APPROVAL_GRANTED)
    assert granted.payload["approvers"] == ["user:alice"]
    first = next(e for e in events if e.event_type == ev.COMMAND_ISSUED and e.step == "pay")
    # the grant and the first command: one decision, one transaction, adjacent in the log
    assert first.seq == granted.seq + 1
    row = store.get_approval(int(granted.payload["approval_id"]))
    assert row is not None and [(v["identity"], v["reason"]) for v in row.votes] == [
        ("user:alice", "invoice checked")
    ]


def test_a_denied_step_fails_naming_the_denier_and_never_runs(
    store: port.Store, api: Upstream
) -> None:
    path = unique("deny")

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            gate = Gate(engine)
            xid = gate.start(world.gated("tests/deny", api.url + path))
            row = gate.vote(await gate.pending(xid), BOB, "deny", "over budget")
            assert row.status == ap.DENIED and row.outcome is not None
            assert (row.outcome["by"], row.outcome["reason"]) == ("user:bob", "over budget")
            return await gate.ended(xid)

    state = run(go)
    assert state.status == st.FAILED
    assert state.error is not None and state.error["kind"] == "approval"
    assert state.error["message"] == "approval rejected by user:bob: over budget"
    assert api.count(path) == 0 and issued(store, state.execution_id) == 0


def test_a_quorum_of_two_waits_for_the_second_vote(store: port.Store, api: Upstream) -> None:
    path = unique("quorum")

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            gate = Gate(engine)
            xid = gate.start(
                world.gated(
                    "tests/quorum",
                    api.url + path,
                    quorum=2,
                    approvers="[user:alice, user:bob, user:carol]",
                )
            )
            row = gate.vote(await gate.pending(xid), ALICE)
            assert row.status == ap.PENDING and len(row.votes) == 1
            state = engine.state(xid)
            assert state.step_status["pay"] == ap.AWAITING_APPROVAL and not state.terminal
            assert issued(store, xid) == 0
            assert gate.vote(row, BOB).status == ap.GRANTED
            with pytest.raises(ApprovalClosed) as closed:  # a third vote changes nothing
                gate.vote(row, CAROL)
            assert closed.value.fields["status"] == ap.GRANTED
            return await gate.ended(xid)

    state = run(go)
    assert state.status == st.COMPLETED, state.error
    assert api.count(path) == 1 and issued(store, state.execution_id) == 1


# -- who may vote ----------------------------------------------------------------------------


def test_the_starter_may_not_approve_unless_the_playbook_allows_it(
    store: port.Store, api: Upstream
) -> None:
    refused_path, allowed_path = unique("self"), unique("self-ok")
    approvers = "[user:dora, user:alice]"

    async def go() -> tuple[int, st.ExecutionState]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            gate = Gate(engine)
            refused = gate.start(
                world.gated("tests/self", api.url + refused_path, approvers=approvers)
            )
            row = await gate.pending(refused)
            before = types(store, refused)
            with pytest.raises(SelfApproval) as exc:
                gate.vote(row, DORA)
            assert exc.value.code == "self_approval" and "user:dora" in exc.value.message
            assert types(store, refused) == before, "a refused vote appends nothing"
            allowed = gate.start(
                world.gated(
                    "tests/self-ok", api.url + allowed_path, approvers=approvers, self_ok=True
                )
            )
            assert gate.vote(await gate.pending(allowed), DORA).status == ap.GRANTED
            return refused, await gate.ended(allowed)

    refused, state = run(go)
    assert state.status == st.COMPLETED, state.error
    assert api.count(allowed_path) == 1 and api.count(refused_path) == 0
    assert issued(store, refused) == 0


def test_a_second_vote_an_outsider_and_an_unknown_approval_are_refused(
    store: port.Store, api: Upstream
) -> None:
    path = unique("refusals")

    async def go() -> None:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            gate = Gate(engine)
            xid = gate.start(world.gated("tests/refusals", api.url + path, quorum=2))
            row = await gate.pending(xid)
            gate.vote(row, ALICE)
            before = types(store, xid)
            with pytest.raises(AlreadyVoted):
                gate.vote(row, ALICE, "deny", "changed my mind")
            with pytest.raises(NotAnApprover):
                gate.vote(row, CAROL)
            with pytest.raises(NotAnApprover):  # the role is not an approvers entry
                gate.vote(row, Voter("user:eve", frozenset({"admin", "finance"})))
            with pytest.raises(ApprovalNotFound):
                engine.service.decide_approval(424242, ALICE, "approve", None)
            assert types(store, xid) == before, "no refusal appended anything"
            after = store.get_approval(row.approval_id)
            assert after is not None and after.status == ap.PENDING and len(after.votes) == 1
            assert api.count(path) == 0 and issued(store, xid) == 0

    run(go)


# -- expiry ----------------------------------------------------------------------------------


def test_an_approval_expires_before_the_decision(store: port.Store, api: Upstream) -> None:
    path = unique("expiry")

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            gate = Gate(engine)
            xid = gate.start(world.gated("tests/expiry", api.url + path, expires_in="1s"))
            row = await gate.pending(xid)
            state = await gate.ended(xid)  # the engine's own timer, at expires_at
            with pytest.raises(ApprovalClosed) as closed:
                gate.vote(row, ALICE)
            assert closed.value.fields["status"] == ap.EXPIRED
            return state

    state = run(go)
    assert state.status == st.FAILED and state.error is not None
    assert (state.error["kind"], state.error["message"]) == (
        "approval",
        "approval expired after 1s",
    )
    assert api.count(path) == 0 and issued(store, state.execution_id) == 0


def test_a_vote_after_expires_at_is_refused_and_records_the_expiry(
    store: port.Store, api: Upstream
) -> None:
    path = unique("expiry-vote")
    skew = [0.0]  # the engine's clock runs ahead of the wall clock by this much

    async def go() -> tuple[int, st.ExecutionState]:
        async with EmbeddedEngine(
            store, concurrency=2, clock=lambda: time.time() + skew[0]
        ) as engine:
            gate = Gate(engine)
            xid = gate.start(world.gated("tests/expiry-vote", api.url + path))  # expires in 1h
            row = await gate.pending(xid)
            skew[0] = 2 * 3600.0  # past expires_at, before any timer of the engine fired
            with pytest.raises(ApprovalClosed) as closed:
                gate.vote(row, ALICE)
            assert closed.value.fields["status"] == ap.EXPIRED
            return xid, await gate.ended(xid)

    xid, state = run(go)
    assert state.status == st.FAILED and state.error is not None
    assert state.error["message"] == "approval expired after 1h"
    assert ev.APPROVAL_DECIDED not in types(store, xid), "the late vote was not appended"
    assert api.count(path) == 0 and issued(store, xid) == 0


def test_an_approval_expires_while_no_process_runs(store: port.Store, api: Upstream) -> None:
    path = unique("expiry-down")
    text = world.gated("tests/expiry-down", api.url + path, expires_in="1s")

    async def request() -> tuple[int, float]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            xid = Gate(engine).start(text)
            row = await Gate(engine).pending(xid)
            assert row.expires_at is not None
            return xid, row.expires_at

    xid, expires_at = run(request)
    assert ev.APPROVAL_EXPIRED not in types(store, xid), "the engine stopped before the expiry"
    wait_for(lambda: time.time() > expires_at, "the approval's expires_at to pass", timeout=5)

    async def resume() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            engine.resume(xid)
            return await Gate(engine).ended(xid)

    state = run(resume)
    assert state.status == st.FAILED and state.error is not None
    assert state.error["message"] == "approval expired after 1s"
    row = store.get_approval(
        next(e.event_id for e in store.load(xid) if e.event_type == ev.APPROVAL_REQUESTED)
    )
    assert row is not None and row.status == ap.EXPIRED
    assert api.count(path) == 0 and issued(store, xid) == 0


# -- granted, but not what was approved ------------------------------------------------------


@pytest.mark.parametrize("what", ["policy", "input"])
def test_a_grant_is_invalidated_when_the_context_changed_after_the_request(
    store: port.Store,
    api: Upstream,
    what: str,
) -> None:
    path = unique(f"raced-{what}")

    async def go() -> tuple[port.ApprovalRow, st.ExecutionState]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            gate = Gate(engine)
            xid = gate.start(world.raced(f"tests/raced-{what}", api.url + path, what=what))
            row = await gate.pending(xid)
            # the parallel branch sets ctx.amount after the request was made
            await wait_for_async(
                lambda: engine.state(xid).ctx.get("amount") == 9000,
                "raise_amount to set ctx.amount",
            )
            assert engine.state(xid).step_status["pay"] == ap.AWAITING_APPROVAL
            voted = gate.vote(row, ALICE)
            return voted, await gate.ended(xid)

    row, state = run(go)
    assert row.status == ap.INVALIDATED and row.outcome is not None
    assert state.status == st.FAILED and state.error is not None
    assert state.error["kind"] == "approval"
    if what == "policy":
        assert (row.outcome["cause"], row.outcome["changed"]) == ("policy", None)
        assert state.error["message"] == "approval invalidated: amount 9000 exceeds the 5,000 limit"
    else:
        assert (row.outcome["cause"], row.outcome["changed"]) == ("changed", "config.json.amount")
        assert state.error["message"] == (
            "approval invalidated: the call changed since it was approved (config.json.amount)"
        )
    assert api.count(path) == 0 and issued(store, state.execution_id) == 0


def test_a_later_iteration_whose_call_changed_after_the_grant_is_never_issued(
    store: port.Store, api: Upstream
) -> None:
    path = unique("loop")

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            gate = Gate(engine)
            xid = gate.start(world.loop_writing_ctx("tests/loop", api.url + path))
            gate.vote(await gate.pending(xid), ALICE)
            return await gate.ended(xid)

    state = run(go)
    assert state.status == st.FAILED and state.error is not None
    assert state.error["kind"] == "approval"
    assert state.error["message"] == (
        "iteration 1: approval invalidated before attempt 1: the call changed since it was "
        "approved (config.json.seen)"
    )
    # iteration 0 ran as approved; iteration 1 (it reads ctx.seen, written by 0) never did
    assert [r.body for r in api.requests(path)] == [{"i": 0, "seen": "none"}]
    assert issued(store, state.execution_id) == 1
    refusal = invalidation(store, state.execution_id)
    assert (refusal["index"], refusal["attempt"], refusal["cause"]) == (1, 1, "changed")


# -- a cancelled run, a crash after the vote -------------------------------------------------


def test_a_decision_on_a_cancelled_run_is_refused(store: port.Store, api: Upstream) -> None:
    path = unique("cancel")

    async def go() -> tuple[port.ApprovalRow, st.ExecutionState]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            gate = Gate(engine)
            xid = gate.start(world.gated("tests/cancel", api.url + path))
            row = await gate.pending(xid)
            engine.cancel(xid)
            state = await gate.ended(xid)
            with pytest.raises(ApprovalClosed) as closed:
                gate.vote(row, ALICE)
            assert closed.value.fields["status"] == ap.CANCELLED
            return row, state

    row, state = run(go)
    assert state.status == st.CANCELLED
    after = store.get_approval(row.approval_id)
    assert after is not None and after.status == ap.CANCELLED and after.votes == []
    assert api.count(path) == 0 and issued(store, state.execution_id) == 0


def test_a_vote_appended_while_nobody_drives_the_run_is_acted_on_once(
    store: port.Store, api: Upstream
) -> None:
    path = unique("crash")

    async def request() -> tuple[int, port.ApprovalRow]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            gate = Gate(engine)
            xid = gate.start(world.gated("tests/crash", api.url + path, quorum=2))
            row = await gate.pending(xid)
            gate.vote(row, ALICE)
            return xid, row

    xid, row = run(request)
    # the last vote, from a process that does not drive the run: the vote alone
    leased = LeasedIds(store, time.time, holder=holder_name("approve"), ttl=30.0)
    try:
        approval = append_decision(
            store, Orchestrator(store, new_id=leased), row.approval_id, BOB, "approve", None
        )
    finally:
        leased.release()
    assert len(approval.approvals) == 2 and approval.status == ap.PENDING
    assert issued(store, xid) == 0 and types(store, xid)[-1] == ev.APPROVAL_DECIDED

    async def resume(concurrency: int) -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=concurrency) as engine:
            state = engine.resume(xid)
            if concurrency == 0:  # no worker: the decision only
                return state
            return await Gate(engine).ended(xid)

    run(lambda: resume(0))
    assert issued(store, xid) == 1 and api.count(path) == 0
    log = types(store, xid)
    assert log.count(ev.APPROVAL_GRANTED) == 1
    state = run(lambda: resume(2))  # a second recovery: it runs the command, issues none
    assert state.status == st.COMPLETED, state.error
    assert issued(store, xid) == 1 and api.count(path) == 1
    assert types(store, xid).count(ev.APPROVAL_GRANTED) == 1


# -- every attempt is checked again, not only the first (issue 33) -------------------------


def invalidation(store: port.Store, xid: int) -> dict[str, Any]:
    """The `approval.invalidated` of the run, and the approval row reading invalidated."""
    [event] = [e for e in store.load(xid) if e.event_type == ev.APPROVAL_INVALIDATED]
    row = store.get_approval(int(event.payload["approval_id"]))
    assert row is not None and row.status == ap.INVALIDATED, row
    assert row.outcome is not None and row.outcome["reason"] == event.payload["reason"]
    return dict(event.payload)


def failed_before_attempt_2(state: st.ExecutionState, why: str) -> None:
    assert state.status == st.FAILED, state.error
    assert state.error is not None and state.error["kind"] == "approval"
    assert state.error["message"].startswith(f"approval invalidated before attempt 2: {why}")


def test_a_retry_after_the_approval_expired_never_runs(store: port.Store, api: Upstream) -> None:
    """The issue's case: attempt 1 failed after `expires_at`; its retry was issued and ran."""
    base = unique("retry-expired")
    pay = base + "/pay"
    api.hold(pay)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=4) as engine:
            gate = Gate(engine)
            text = world.retried(
                "tests/retry-expired", api.url + base, what="expiry", expires_in="4s"
            )
            xid = gate.start(text)
            row = await gate.pending(xid)
            gate.vote(row, ALICE)
            await wait_for_async(lambda: api.count(pay) == 1, "attempt 1's request")
            assert row.expires_at is not None
            expires_at = row.expires_at
            await wait_for_async(lambda: time.time() > expires_at, "the expiry")
            api.answer(pay, 503)
            api.release(pay)
            return await gate.ended(xid)

    try:
        state = run(go)
    finally:
        api.release(pay)
    failed_before_attempt_2(state, "the approval expired ")
    assert api.count(pay) == 1 and issued(store, state.execution_id) == 1
    refusal = invalidation(store, state.execution_id)
    assert (refusal["cause"], refusal["attempt"]) == ("expired", 2)


def test_a_retry_after_the_policy_turned_false_never_runs(store: port.Store, api: Upstream) -> None:
    base = unique("retry-policy")
    pay, change = base + "/pay", base + "/change"
    api.hold(pay)
    api.hold(change)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=4) as engine:
            gate = Gate(engine)
            xid = gate.start(world.retried("tests/retry-policy", api.url + base, what="policy"))
            gate.vote(await gate.pending(xid), ALICE)
            await wait_for_async(lambda: api.count(pay) == 1, "attempt 1's request")
            api.release(change)  # granted on a policy that held; now ctx.frozen is set
            await wait_for_async(lambda: engine.state(xid).ctx.get("frozen") is True, "the freeze")
            api.answer(pay, 503)
            api.release(pay)
            return await gate.ended(xid)

    try:
        state = run(go)
    finally:
        api.release(pay)
        api.release(change)
    failed_before_attempt_2(state, "payments are frozen")
    assert api.count(pay) == 1 and issued(store, state.execution_id) == 1
    refusal = invalidation(store, state.execution_id)
    assert (refusal["cause"], refusal["attempt"]) == ("policy", 2)


def test_a_call_changed_before_the_reissue_after_a_lost_lease_never_runs(
    store: port.Store, api: Upstream
) -> None:
    base = unique("lost-changed")
    pay, change = base + "/pay", base + "/change"
    api.hold(pay)
    api.hold(change)

    def silent(*args: Any, **kwargs: Any) -> Any:  # the claim is live, its lease lapses
        raise StoreUnavailable("this worker's heartbeats do not reach the database")

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=4) as engine:
            gate = Gate(engine)
            text = world.retried("tests/lost-changed", api.url + base, what="input", liveness="1s")
            xid = gate.start(text)
            gate.vote(await gate.pending(xid), ALICE)
            await wait_for_async(lambda: api.count(pay) == 1, "attempt 1's request")
            api.release(change)
            await wait_for_async(lambda: engine.state(xid).ctx.get("amount") == 9000, "the change")
            engine.service.heartbeat = silent  # type: ignore[method-assign]
            return await gate.ended(xid)

    try:
        state = run(go)
    finally:
        api.release(pay)  # the abandoned attempt 1 ends; its report is stale
        api.release(change)
    failed_before_attempt_2(state, "the call changed since it was approved (config.json.amount)")
    xid = state.execution_id
    assert api.count(pay) == 1 and issued(store, xid) == 1
    assert ev.COMMAND_LEASE_EXPIRED in types(store, xid)
    refusal = invalidation(store, xid)
    assert (refusal["cause"], refusal["changed"]) == ("changed", "config.json.amount")


def test_an_attempt_claimed_after_the_expiry_refuses_to_run_its_tool(
    store: port.Store, api: Upstream
) -> None:
    """Granted and issued in time, claimed too late (no worker until after `expires_at`):
    the attempt itself refuses, before its tool runs (fail closed)."""
    base = unique("claimed-late")
    pay = base + "/pay"
    text = world.retried("tests/claimed-late", api.url + base, what="expiry", expires_in="5s")

    async def request() -> tuple[int, port.ApprovalRow]:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            xid = Gate(engine).start(text)
            return xid, await Gate(engine).pending(xid)

    xid, row = run(request)
    assert row.expires_at is not None
    expires_at = row.expires_at
    # the vote alone, then a driver with no worker grants and issues: the command waits
    leased = LeasedIds(store, time.time, holder=holder_name("approve"), ttl=30.0)
    try:
        append_decision(
            store, Orchestrator(store, new_id=leased), row.approval_id, ALICE, "approve", None
        )
    finally:
        leased.release()

    async def grant() -> None:
        async with EmbeddedEngine(store, concurrency=0) as engine:
            engine.resume(xid)

    run(grant)
    granted = store.get_approval(row.approval_id)
    assert granted is not None and granted.status == ap.GRANTED
    assert issued(store, xid) == 1
    wait_for(lambda: time.time() > expires_at, "the expiry", timeout=10)

    async def resume() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=2) as engine:
            engine.resume(xid)
            return await Gate(engine).ended(xid)

    state = run(resume)
    assert state.status == st.FAILED and state.error is not None
    assert state.error["message"].startswith(
        "approval invalidated before attempt 1: the approval expired "
    )
    assert api.count(pay) == 0 and issued(store, xid) == 1
    [failed] = [e for e in store.load(xid) if e.event_type == ev.COMMAND_FAILED]
    assert failed.payload["error"]["invalidated"]["cause"] == "expired"
    refusal = invalidation(store, xid)
    assert (refusal["cause"], refusal["attempt"]) == ("expired", 1)
