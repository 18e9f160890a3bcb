"""Every example validates without a warning and runs end to end as its header says."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from milepost.conformance.mock_api import MockServer
from milepost.core import state as st
from milepost.core.approval_state import Voter
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from tests.receiver import serve
from tests.shared import wait_for_async

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLAYBOOKS = sorted(EXAMPLES.glob("*.yaml"))


def run(tmp_path: Path, name: str, workload: dict[str, Any] | None = None) -> st.ExecutionState:
    path = EXAMPLES / f"{name}.yaml"
    store = SQLiteStore(tmp_path / "examples.db")

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=4) as engine:
            return await engine.run(load.load_file(path), path.read_text(), workload, timeout=60)

    try:
        return asyncio.run(go())
    finally:
        store.close()


def test_the_examples_are_all_here() -> None:
    # a new example is covered by the tests below only when it is listed in RUNS
    assert {p.stem for p in PLAYBOOKS} == set(RUNS) | {"approval"}


@pytest.mark.parametrize("path", PLAYBOOKS, ids=lambda p: p.stem)
def test_an_example_validates_without_a_warning(path: Path) -> None:
    playbook = load.load_file(path)
    assert playbook.warnings == ()
    assert playbook.path == f"examples/{path.stem}"


RUNS = {
    "hello_world": False,
    "parallel_loop": False,
    "branches": False,
    "flaky_retry": True,
    "demo": True,
    "teardown": False,
}
"""The examples that run on their own, and whether they need the bundled mock API."""


@pytest.mark.parametrize("name", sorted(RUNS))
def test_an_example_runs_to_completion(tmp_path: Path, name: str) -> None:
    if RUNS[name]:
        with MockServer() as api:
            state = run(tmp_path, name, {"api_url": api.url})
    else:
        state = run(tmp_path, name)
    assert state.status == st.COMPLETED, state.error


def test_the_teardown_example_removes_its_directory_whatever_the_end(tmp_path: Path) -> None:
    for fail, status in ((False, st.COMPLETED), (True, st.FAILED)):
        state = run(tmp_path, "teardown", {"fail": fail})
        assert state.status == status, state.error
        made = state.results["start"]["dir"]
        assert state.results["remove_workspace"] == {"removed": made}
        assert not Path(made).exists()
        assert state.results["report"]["run"] == status


def test_the_refund_example_under_the_limit_is_sent_at_once_without_approval(
    tmp_path: Path,
) -> None:
    with serve() as refunds:
        refunds.reply = {"refund_id": "R-1", "status": "sent"}
        state = run(tmp_path, "approval", {"refund_api": refunds.url, "amount": 800})
    assert state.status == st.COMPLETED, state.error
    [sent] = refunds.received
    assert sent.path == "/refunds"
    assert sent.json == {"order": "A-1042", "amount": 800, "reason": "arrived damaged"}
    assert len(sent.headers["idempotency-key"]) == 64  # operation_key: one refund per step run
    assert state.results["done"] == {
        "order": "A-1042",
        "refund": {"refund_id": "R-1", "status": "sent"},
    }


async def refund(
    store: SQLiteStore, workload: dict[str, Any], voters: list[Voter]
) -> st.ExecutionState:
    """The example over the limit: wait for its request, then each of `voters` approves."""
    path = EXAMPLES / "approval.yaml"
    async with EmbeddedEngine(store) as engine:
        xid = engine.start(load.load_file(path), path.read_text(), workload)
        [pending] = await wait_for_async(
            lambda: engine.service.approvals(execution_id=xid, status="pending"), "the request"
        )
        assert pending.quorum == 2 and pending.risk == "high"
        assert pending.expires_at == pytest.approx(pending.requested_at + 86_400)
        for voter in voters:
            engine.service.decide_approval(pending.approval_id, voter, "approve", None)
        return await engine.wait(xid, timeout=60)


def test_the_refund_example_over_the_limit_goes_out_once_after_two_approvals(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "refund.db")
    try:
        with serve() as refunds:
            state = asyncio.run(
                refund(store, {"refund_api": refunds.url, "amount": 1800}, [ALICE, FINANCE])
            )
    finally:
        store.close()
    assert state.status == st.COMPLETED, state.error
    [sent] = refunds.received  # two approvals, one refund
    assert sent.json["amount"] == 1800


def test_the_refund_example_over_5000_is_refused_at_dispatch_however_many_approve(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "refund.db")
    try:
        with serve() as refunds:
            state = asyncio.run(
                refund(store, {"refund_api": refunds.url, "amount": 7200}, [ALICE, FINANCE])
            )
    finally:
        store.close()
    assert state.status == st.FAILED
    assert refunds.received == []  # the refund never went out
    assert "approval invalidated: amount 7200 exceeds the 5,000 limit" in str(state.error)


ALICE = Voter("user:alice", frozenset())
FINANCE = Voter("user:carol", frozenset({"finance"}))
