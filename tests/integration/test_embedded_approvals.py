"""The embedded engine's listeners (what `milepost run` displays) see every event of the
log of the runs it drives, in log order: its own, its claims, and the votes another
process appends to the same database file."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from milepost.core import approval_state as ap
from milepost.core import events as ev
from milepost.core import state as st
from milepost.core.approval_state import Voter
from milepost.engine.approvals import append_decision
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.orchestrator import Orchestrator
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from tests.shared import wait_for_async

TEXT = (
    "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: g, path: tests/gated}\n"
    + textwrap.dedent("""
    workflow:
      - step: start
        loop: {in: "{{ [1, 2, 3] }}", iterator: n, spec: {mode: parallel}}
        tool: {kind: python, input: {n: "{{ n }}"}, code: "result = n"}
        next: [{step: pay}]
      - step: pay
        tool: {kind: python, code: "result = 'paid'"}
        spec: {approval: {approvers: [user:alice, user:bob], quorum: 2}}
    """)
)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "m.db"


@pytest.fixture
def other(db: Path) -> Iterator[SQLiteStore]:
    """Another process's connection to the same file."""
    store = SQLiteStore(db)
    yield store
    store.close()


def vote_from_elsewhere(store: SQLiteStore, xid: int, voter: Voter) -> None:
    """What `milepost approve` does in another process: the vote appended behind the log."""
    (row,) = store.list_approvals(execution_id=xid)
    append_decision(
        store, Orchestrator(store, machine_id=901), row.approval_id, voter, "approve", None
    )


def seqs(events: list[ev.Event], xid: int) -> list[int]:
    return [e.seq for e in events if e.execution_id == xid]


def test_listeners_see_every_event_of_the_log_in_order_with_other_processes_votes(
    db: Path, other: SQLiteStore
) -> None:
    seen, state = asyncio.run(_voted_from_elsewhere(db, other))
    assert state.status == st.COMPLETED
    xid = state.execution_id
    log = other.load(xid)
    assert seqs(seen, xid) == [e.seq for e in log]  # every event, once, in log order
    assert [e.event_id for e in seen] == [e.event_id for e in log]
    assert {ev.COMMAND_CLAIMED, ev.APPROVAL_GRANTED} <= {e.event_type for e in seen}
    votes = [e.payload["identity"] for e in seen if e.event_type == ev.APPROVAL_DECIDED]
    assert votes == ["user:alice", "user:bob"]


async def _voted_from_elsewhere(
    db: Path, other: SQLiteStore
) -> tuple[list[ev.Event], st.ExecutionState]:
    seen: list[ev.Event] = []
    store = SQLiteStore(db)
    try:
        async with EmbeddedEngine(store, machine_id=1, concurrency=4) as engine:
            engine.subscribe(seen.append)
            xid = engine.start(load.load_text(TEXT), TEXT)
            await wait_for_async(
                lambda: any(e.event_type == ev.APPROVAL_REQUESTED for e in seen),
                "the approval request",
                timeout=30,
            )
            vote_from_elsewhere(other, xid, Voter("user:alice"))
            # a vote that decides nothing yet reaches the listeners all the same
            await wait_for_async(
                lambda: any(e.event_type == ev.APPROVAL_DECIDED for e in seen),
                "the first vote",
                timeout=30,
            )
            vote_from_elsewhere(other, xid, Voter("user:bob"))
            return seen, await engine.wait(xid, timeout=30)
    finally:
        store.close()


def test_a_resumed_run_is_told_from_the_start_of_its_log(db: Path, other: SQLiteStore) -> None:
    asyncio.run(_resumed(db, other))


async def _resumed(db: Path, other: SQLiteStore) -> None:
    store = SQLiteStore(db)
    try:
        async with EmbeddedEngine(store, machine_id=1) as first:
            xid = first.start(load.load_text(TEXT), TEXT)
            await wait_for_async(
                lambda: first.state(xid).approvals, "the approval request", timeout=30
            )
        # a clean exit released the lease; the run waits with nobody driving it
        seen: list[ev.Event] = []
        async with EmbeddedEngine(store, machine_id=2) as second:
            second.subscribe(seen.append)
            await second.take_over(xid)
            (approval,) = second.state(xid).approvals.values()
            assert approval.status == ap.PENDING
            # everything so far, though this engine appended nothing (still waiting)
            assert seqs(seen, xid) == [e.seq for e in other.load(xid)]
            vote_from_elsewhere(other, xid, Voter("user:alice"))
            await wait_for_async(
                lambda: seen[-1].event_type == ev.APPROVAL_DECIDED, "the vote told", timeout=30
            )
    finally:
        store.close()
