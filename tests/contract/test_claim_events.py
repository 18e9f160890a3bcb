"""Claims are events: the store writes `command.claimed` / `command.released` with the claim,
the command projection is rebuilt from the log alone, and an orchestrator pays nothing
for claims that land in a log between its appends (on every adapter)."""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.orchestrator import Orchestrator
from milepost.playbook import load
from milepost.store import port, projection
from tests.contract.conftest import StoreFactory
from tests.contract.log import event, issued, new_id
from tests.reports import completed


def report(xid: int, etype: str, cid: int, epoch: int) -> ev.Event:
    return dataclasses.replace(
        event(xid, etype, command_id=cid, run=1, index=-1, attempt=1), meta={"epoch": epoch}
    )


def test_the_command_projection_is_rebuilt_from_the_log(store: Any) -> None:
    """Issue, claim, heartbeat, release, re-claim, complete, fail, lease expiry and the
    settlement of a cancelled run, over two executions: the rows rebuilt from `load` are
    the stored ones, but for the lease end a heartbeat moved (the projection's only)."""
    store.append(
        [
            event(1, ev.EXECUTION_STARTED, None, path="p"),
            *(issued(1, c) for c in (11, 12, 13, 14)),
            event(2, ev.EXECUTION_STARTED, None, path="q"),
            issued(2, 21),
            issued(2, 22),
        ]
    )
    first = store.claim(11, "w1", now=10.0, lease_s=30.0, new_id=new_id)
    store.heartbeat(11, "w1", first.epoch, now=20.0, lease_s=30.0)  # the row's lease: 50
    store.append([report(1, ev.COMMAND_COMPLETED, 11, first.epoch)], check_claims=True)
    taken = store.claim(12, "w2", now=11.0, lease_s=30.0, new_id=new_id)
    assert store.release(12, "w2", taken.epoch, 12.0, new_id=new_id)
    again = store.claim(12, "w3", now=13.0, lease_s=30.0, new_id=new_id)
    assert again.epoch == 2
    store.append([report(1, ev.COMMAND_FAILED, 12, again.epoch)], check_claims=True)
    lapsed = store.claim(13, "w4", now=14.0, lease_s=1.0, new_id=new_id)
    store.append([event(1, ev.COMMAND_LEASE_EXPIRED, command_id=13, epoch=lapsed.epoch)])
    store.claim(21, "w5", now=15.0, lease_s=30.0, new_id=new_id)
    store.append(
        [event(2, ev.EXECUTION_CANCEL_REQUESTED, None), event(2, ev.EXECUTION_CANCELLED, None)]
    )  # 21 claimed and 22 queued: cancelled

    log = store.load(1) + store.load(2)
    assert sum(e.event_type == ev.COMMAND_CLAIMED for e in log) == 5
    assert sum(e.event_type == ev.COMMAND_RELEASED for e in log) == 1
    rebuilt = projection.rebuild(log).commands
    stored = store.get_commands([11, 12, 13, 14, 21, 22])
    assert {c: r.status for c, r in stored.items()} == {
        11: port.COMMAND_COMPLETED,
        12: port.COMMAND_FAILED,
        13: port.COMMAND_FAILED,
        14: port.COMMAND_QUEUED,
        21: port.COMMAND_CANCELLED,
        22: port.COMMAND_CANCELLED,
    }
    assert stored[11].lease_expires_at == 50.0 and rebuilt[11].lease_expires_at == 40.0
    assert rebuilt == {**stored, 11: dataclasses.replace(stored[11], lease_expires_at=40.0)}


def test_a_claim_and_a_release_are_in_the_log_with_who_and_which_epoch(store: Any) -> None:
    store.append([event(3, ev.EXECUTION_STARTED, None, path="p"), issued(3, 31)])
    lease = store.claim(31, "w1", now=10.0, lease_s=5.0, new_id=new_id)
    store.release(31, "w1", lease.epoch, 11.0, new_id=new_id)
    [(_, again)] = store.append_and_claim([], port.ClaimRequest("w2", 12.0, 5.0, 3, new_id=new_id))[
        1
    ]
    claimed, released, reclaimed = store.load(3)[2:]
    assert (claimed.event_type, claimed.step, claimed.worker_id) == (ev.COMMAND_CLAIMED, "s", "w1")
    assert claimed.payload == {
        "command_id": 31,
        "worker_id": "w1",
        "epoch": 1,
        "lease_expires_at": 15.0,
        "run": 1,
        "index": -1,
        "attempt": 1,
    }
    assert released.event_type == ev.COMMAND_RELEASED
    assert released.payload == {
        "command_id": 31,
        "worker_id": "w1",
        "epoch": 1,
        "run": 1,
        "index": -1,
        "attempt": 1,
    }
    assert reclaimed.payload["worker_id"] == "w2" and reclaimed.payload["epoch"] == again.epoch == 2
    assert [e.seq for e in store.load(3)] == [1, 2, 3, 4, 5]
    # a heartbeat moves the lease end in the projection only
    store.heartbeat(31, "w2", 2, now=13.0, lease_s=5.0)
    assert len(store.load(3)) == 5 and store.get_command(31).lease_expires_at == 18.0


TWO_STEPS = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: t, path: tests/claims}
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
        next: after
      - step: after
        tool: {kind: python, code: "result = 2"}
    """)


@pytest.mark.parametrize("shared", [True, False])
def test_claims_between_two_reports_cost_no_log_moved_and_no_decision(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    store = make_store()
    orchestrator = Orchestrator(store, shared=shared)
    pb = load.load_text(TWO_STEPS)
    _, version = orchestrator.register(TWO_STEPS, pb)
    xid, outcome = orchestrator.start(pb, version, {})
    [(_, cmd)] = outcome.issued
    appends: list[Any] = []
    real = store.append_and_claim

    def counted(*args: Any, **kw: Any) -> Any:
        try:
            result = real(*args, **kw)
        except Exception as exc:
            appends.append(exc)
            raise
        appends.append(kw.get("expect"))
        return result

    # another transaction claims the command: its event lands after the orchestrator's
    [(_, lease)] = store.claim_next("w1", orchestrator.clock(), 30.0, 1, new_id=orchestrator.new_id)
    monkeypatch.setattr(store, "append_and_claim", counted)
    done = completed(orchestrator, xid, cmd, 1, epoch=lease.epoch)
    claim = port.ClaimRequest("w1", orchestrator.clock(), 30.0, 1, new_id=orchestrator.new_id)
    outcome = orchestrator.process([done], claim=claim)
    [(row, nxt)] = outcome.claimed  # the next command, claimed in the report's transaction
    assert row.step == "after" and xid not in outcome.wake_at
    second = completed(orchestrator, xid, row, 2, epoch=nxt.epoch)
    outcome = orchestrator.process([second])
    assert outcome.finished and xid not in outcome.wake_at
    # one append a report, none refused: the claims moved no watermark of a decision
    assert len(appends) == 2 and not any(isinstance(a, Exception) for a in appends)
    kinds = [e.event_type for e in store.load(xid)]
    assert kinds.count(ev.COMMAND_CLAIMED) == 2 and kinds[-1] == ev.EXECUTION_COMPLETED
    # the cached state is the fold of the log, claims included
    assert orchestrator.state(xid).last_seq == store.load(xid)[-1].seq


def test_a_claim_made_in_a_report_s_transaction_is_folded_not_read_back(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    orchestrator = Orchestrator(store)
    pb = load.load_text(TWO_STEPS)
    _, version = orchestrator.register(TWO_STEPS, pb)
    claim = port.ClaimRequest("w1", orchestrator.clock(), 30.0, 1, new_id=orchestrator.new_id)
    xid, outcome = orchestrator.start(pb, version, {}, claim=claim)
    [(row, lease)] = outcome.claimed
    assert lease.event is not None and lease.event.event_type == ev.COMMAND_CLAIMED
    # the claim's event is numbered right after the start's events and already folded
    assert orchestrator.cached(xid).last_seq == lease.event.seq == store.load(xid)[-1].seq
    loads: list[int] = []
    real = store.load
    monkeypatch.setattr(store, "load", lambda *a, **kw: loads.append(1) or real(*a, **kw))
    done = completed(orchestrator, xid, row, 1, epoch=lease.epoch)
    outcome = orchestrator.process([done], claim=claim)
    assert outcome.claimed and xid not in outcome.wake_at
    assert loads == []  # nothing of its own log to read back


def test_claims_of_runs_the_claiming_call_did_not_hold_are_folded_not_read_back(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a PostgreSQL server's engine (shared, not exclusive): a claim alone takes the first
    # commands of two runs; each claim's event is folded into its run's cached state, so
    # that run's next report does not read the log back (W3 on the server read it after
    # nearly every report)
    store = make_store()
    engine = Lifecycle(store, Orchestrator(store, shared=True))
    pb = load.load_text(TWO_STEPS)
    _, version = engine.register(TWO_STEPS, pb)
    first, _ = engine.start(pb, version, {})
    second, _ = engine.start(pb, version, {})
    claimed = engine.claim_next("w1", 30.0, 10)
    assert sorted(row.execution_id for row, _ in claimed) == sorted([first, second])
    for row, lease in claimed:
        assert lease.event is not None
        cached = engine.orchestrator.cached(row.execution_id)
        assert cached is not None and cached.last_seq == lease.event.seq
        assert lease.event.seq == store.load(row.execution_id)[-1].seq
    loads: list[int] = []
    real = store.load
    monkeypatch.setattr(store, "load", lambda *a, **kw: loads.append(1) or real(*a, **kw))
    row, lease = next((r, le) for r, le in claimed if r.execution_id == first)
    done = ev.new_event(
        engine.new_id(),
        first,
        ev.COMMAND_COMPLETED,
        engine.clock(),
        step="start",
        payload={"command_id": row.command_id, "result": 1},
        meta={"epoch": lease.epoch},
    )
    reported = engine.report([done], engine.claim_request("w1", 30.0, 10))
    assert [c.step for c, _ in reported.claimed] == ["after"]
    assert loads == []  # nothing of its own log to read back


def test_a_claim_numbers_its_event_after_what_another_process_appended_meanwhile(
    make_store: StoreFactory,
) -> None:
    # this process's cache of where a log ends is stale once another process appended to
    # it: the claim's event must not take that seq (the careful retry reads the log)
    mine, theirs = make_store(), make_store()
    mine.append([event(61, ev.EXECUTION_STARTED, None, path="p", version=1), issued(61, 611)])
    theirs.append([event(61, ev.STEP_ENTER, "t", run=1)])  # seq 3, unseen by `mine`
    mine.append([event(62, ev.EXECUTION_STARTED, None, path="p", version=1)])
    _, claimed = mine.append_and_claim(
        [event(62, ev.STEP_ENTER, "t", run=1)], port.ClaimRequest("w", 1.0, 5.0, 5, new_id=new_id)
    )
    assert [row.command_id for row, _ in claimed] == [611]
    log = mine.load(61)
    assert [e.seq for e in log] == [1, 2, 3, 4]
    assert log[-1].event_type == ev.COMMAND_CLAIMED and claimed[0][1].event.seq == 4
