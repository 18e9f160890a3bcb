"""The approval projection and the token identities, on every adapter: rows follow the
log (requested, votes, closes, cancels), the reads filter and page, and the rows rebuilt
from the log alone are the stored ones."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.store import approvals as ap
from milepost.store import migrations, port, projection
from tests.contract.conftest import StoreFactory
from tests.contract.old_schema import store_at_version

_ids = itertools.count(70_000)


def event(
    xid: int, etype: str, step: str | None = "pay", status: str | None = None, **payload: Any
) -> ev.Event:
    eid = next(_ids)
    return ev.new_event(
        eid, xid, etype, 100.0 + (eid - 70_000), step=step, status=status, payload=payload
    )


def requested(
    xid: int,
    step: str = "pay",
    run: int = 1,
    *,
    risk: str = "high",
    approvers: tuple[str, ...] = ("role:finance", "user:alice"),
    quorum: int = 2,
    expires_at: float | None = 5000.0,
) -> ev.Event:
    eid = next(_ids)
    payload = {
        "approval_id": eid,
        "run": run,
        "kind": "http",
        "calls": [{"index": -1, "input": {"amount": 7200}, "digest": "d" * 64}],
        "digest": "e" * 64,
        "approvers": list(approvers),
        "quorum": quorum,
        "expires_at": expires_at,
        "expires_in": 3600.0,
        "risk": risk,
        "policy": None,
        "allow_self_approval": False,
        "started_by": "user:carol",
    }
    return ev.new_event(
        eid,
        xid,
        ev.APPROVAL_REQUESTED,
        50.0 + (eid - 70_000),
        step=step,
        status="PENDING",
        payload=payload,
    )


def vote(
    xid: int,
    approval: ev.Event,
    identity: str,
    decision: str = "approve",
    reason: str | None = None,
) -> ev.Event:
    return event(
        xid,
        ev.APPROVAL_DECIDED,
        approval.step,
        approval_id=approval.event_id,
        identity=identity,
        roles=["approver"],
        decision=decision,
        reason=reason,
    )


def started(xid: int, path: str) -> ev.Event:
    return event(xid, ev.EXECUTION_STARTED, None, path=path, version=1)


def test_an_approval_row_follows_its_request_and_votes(store: Any) -> None:
    req = requested(1)
    store.append([started(1, "refunds/big"), req])
    row = store.get_approval(req.event_id)
    assert row == ap.ApprovalRow(
        approval_id=req.event_id,
        execution_id=1,
        step="pay",
        run=1,
        status="pending",
        risk="high",
        approvers=["role:finance", "user:alice"],
        quorum=2,
        expires_at=5000.0,
        requested_at=req.created_at,
        decided_at=None,
        started_by="user:carol",
        digest="e" * 64,
        request=row.request,
        votes=[],
        outcome=None,
        path="refunds/big",
    )
    assert row.request["calls"][0]["input"] == {"amount": 7200}
    first = vote(1, req, "user:alice", reason="ok")
    store.append([first, vote(1, req, "user:alice", "deny")])  # that identity voted: ignored
    votes = store.get_approval(req.event_id).votes
    assert votes == [
        {"identity": "user:alice", "decision": "approve", "reason": "ok", "at": first.created_at}
    ]
    bob = vote(1, req, "user:bob")
    granted = event(
        1,
        ev.APPROVAL_GRANTED,
        approval_id=str(req.event_id),
        run=1,
        approvers=["user:alice", "user:bob"],
        digest="e" * 64,
    )
    store.append([bob, granted, vote(1, req, "user:dan")])  # a vote after the grant: ignored
    row = store.get_approval(req.event_id)
    assert (row.status, row.decided_at) == ("granted", granted.created_at)
    assert [v["identity"] for v in row.votes] == ["user:alice", "user:bob"]
    assert row.outcome == {
        "approval_id": str(req.event_id),
        "run": 1,
        "approvers": ["user:alice", "user:bob"],
        "digest": "e" * 64,
    }
    store.append(
        [event(1, ev.APPROVAL_DENIED, approval_id=req.event_id, by="user:x", reason="late")]
    )  # a closed approval stays as it closed
    assert store.get_approval(req.event_id).status == "granted"
    assert store.get_approval(424242) is None


def test_denied_expired_and_invalidated_close_with_their_payload(store: Any) -> None:
    store.append([started(2, "p")])
    reqs = [requested(2, f"s{i}") for i in range(3)]
    store.append(reqs)
    closes = [
        event(
            2,
            ev.APPROVAL_DENIED,
            "s0",
            approval_id=reqs[0].event_id,
            run=1,
            by="user:bob",
            reason="no",
        ),
        event(2, ev.APPROVAL_EXPIRED, "s1", approval_id=reqs[1].event_id, run=1, expires_at=5000.0),
        event(
            2,
            ev.APPROVAL_INVALIDATED,
            "s2",
            approval_id=reqs[2].event_id,
            run=1,
            cause="changed",
            reason="the call changed",
            changed="input.amount",
        ),
    ]
    store.append(closes)
    rows = [store.get_approval(r.event_id) for r in reqs]
    assert [r.status for r in rows] == ["denied", "expired", "invalidated"]
    assert [r.decided_at for r in rows] == [c.created_at for c in closes]
    assert rows[0].outcome["by"] == "user:bob" and rows[2].outcome["changed"] == "input.amount"


def test_a_granted_approval_reads_invalidated_once_an_attempt_after_it_is_refused(
    store: Any,
) -> None:
    """Only an invalidation changes a granted approval (a later attempt it no longer
    covers); the row keeps its votes and takes the invalidation as its outcome. The rows
    rebuilt from the log are the stored ones."""
    store.append([started(12, "p")])
    req = requested(12, quorum=1)
    store.append([req, vote(12, req, "user:alice")])
    store.append(
        [
            event(
                12,
                ev.APPROVAL_GRANTED,
                approval_id=req.event_id,
                run=1,
                approvers=["user:alice"],
                digest="e" * 64,
            )
        ]
    )
    store.append([event(12, ev.APPROVAL_EXPIRED, approval_id=req.event_id, run=1)])
    assert store.get_approval(req.event_id).status == "granted"  # only an invalidation
    refused = event(
        12,
        ev.APPROVAL_INVALIDATED,
        approval_id=req.event_id,
        run=1,
        index=-1,
        attempt=2,
        cause="expired",
        changed=None,
        reason="the approval expired 14s earlier",
    )
    store.append([refused])
    row = store.get_approval(req.event_id)
    assert (row.status, row.decided_at) == ("invalidated", refused.created_at)
    assert [v["identity"] for v in row.votes] == ["user:alice"]
    assert (row.outcome["cause"], row.outcome["attempt"], row.outcome["reason"]) == (
        "expired",
        2,
        "the approval expired 14s earlier",
    )
    assert projection.rebuild(store.load(12)).approvals == {req.event_id: row}


def test_a_cancelled_step_run_and_an_ended_run_cancel_what_is_pending(store: Any) -> None:
    store.append([started(3, "p")])
    a, b, c = requested(3, "a"), requested(3, "b"), requested(3, "c", run=2)
    store.append([a, b, c])
    exit_b = event(3, ev.STEP_EXIT, "b", "CANCELLED", run=1, reason="cancelled")
    # a step.exit of another run, or not CANCELLED, leaves c and a pending
    store.append(
        [
            exit_b,
            event(3, ev.STEP_EXIT, "c", "CANCELLED", run=1),
            event(3, ev.STEP_EXIT, "a", "FAILED", run=1),
        ]
    )
    assert [store.get_approval(r.event_id).status for r in (a, b, c)] == [
        "pending",
        "cancelled",
        "pending",
    ]
    assert store.get_approval(b.event_id).decided_at == exit_b.created_at
    store.append([event(3, ev.APPROVAL_DENIED, "a", approval_id=a.event_id, by="u", reason="r")])
    store.append([started(4, "q"), other := requested(4)])
    ended = event(3, ev.EXECUTION_FAILED, None, error={"kind": "approval"})
    store.append([ended])
    assert [store.get_approval(r.event_id).status for r in (a, b, c)] == [
        "denied",
        "cancelled",
        "cancelled",
    ]
    assert store.get_approval(c.event_id).decided_at == ended.created_at
    assert store.get_approval(other.event_id).status == "pending"  # another execution's


def test_list_approvals_filters_and_pages_by_id(store: Any) -> None:
    store.append([started(5, "p"), started(6, "q")])
    made = [
        requested(5, "a", risk="high", approvers=("role:finance",)),
        requested(5, "b", risk="low", approvers=("user:alice",)),
        requested(6, "c", risk="high", approvers=("role:finance", "user:alice")),
        requested(6, "d", risk="medium", approvers=("role:finances",)),
        requested(6, "e", risk="high", approvers=("role:finance",)),
    ]
    store.append(made[:2])
    store.append(made[2:])
    store.append(
        [event(6, ev.APPROVAL_DENIED, "e", approval_id=made[4].event_id, by="u", reason="r")]
    )
    ids = [m.event_id for m in made]

    def listed(**filters: Any) -> list[int]:
        return [r.approval_id for r in store.list_approvals(**filters)]

    assert listed() == ids
    assert listed(status="pending") == ids[:4]
    assert listed(status="denied") == [ids[4]]
    assert listed(decided=True) == [ids[4]]  # the history: every status but pending
    assert listed(decided=False) == ids[:4]
    assert listed(decided=True, status="pending") == []
    assert listed(decided=False, execution_id=6, limit=1) == [ids[2]]
    assert listed(execution_id=6) == ids[2:]
    assert listed(approver="role:finance") == [ids[0], ids[2], ids[4]]  # the exact entry
    assert listed(approver="user:alice", status="pending") == [ids[1], ids[2]]
    assert listed(risk="high", status="pending") == [ids[0], ids[2]]
    assert listed(approver="role:fin") == [] and listed(execution_id=99) == []
    assert listed(limit=2) == ids[:2]
    assert listed(limit=2, after=ids[1]) == ids[2:4]
    assert listed(limit=2, after=ids[3]) == ids[4:]
    assert listed(limit=2, after=ids[4]) == []
    assert listed(status="pending", execution_id=6, limit=1, after=ids[2]) == [ids[3]]
    assert store.pending_approvals_by_risk() == {"high": 2, "low": 1, "medium": 1}


def test_the_approval_rows_are_rebuilt_from_the_log(store: Any) -> None:
    """Every kind of change, over two executions and batches of several: the rows rebuilt
    from `load` alone are the stored ones."""
    store.append([started(7, "p7"), started(8, "p8")])
    a, b, c, d = requested(7, "a"), requested(7, "b"), requested(8, "c"), requested(8, "d")
    store.append([a, b, vote(7, a, "user:alice"), c])
    store.append(
        [
            vote(7, a, "user:alice"),
            vote(7, a, "user:bob", "deny", "no"),
            event(7, ev.APPROVAL_DENIED, "a", approval_id=a.event_id, by="user:bob", reason="no"),
            event(7, ev.STEP_EXIT, "a", "FAILED", run=1),
            vote(7, b, "role:x"),
            d,
        ]
    )
    store.append(
        [
            event(
                8,
                ev.APPROVAL_GRANTED,
                "c",
                approval_id=c.event_id,
                approvers=["user:z"],
                digest="e" * 64,
            ),
            event(7, ev.EXECUTION_CANCELLED, None),
            event(8, ev.STEP_EXIT, "d", "CANCELLED", run=1),
        ]
    )
    rebuilt = projection.rebuild(store.load(7) + store.load(8)).approvals
    stored = {r.approval_id: r for r in store.list_approvals()}
    assert {k: r.status for k, r in stored.items()} == {
        a.event_id: "denied",
        b.event_id: "cancelled",
        c.event_id: "granted",
        d.event_id: "cancelled",
    }
    assert rebuilt == stored
    assert [r.approval_id for r in store.list_approvals(status="pending")] == []
    assert store.pending_approvals_by_risk() == {}


def test_a_token_carries_its_user_and_approver_roles(make_store: StoreFactory) -> None:
    store, other = make_store(), make_store()
    row = store.create_token(
        "f" * 64, "approver", "alice's", 5.0, user="alice", approver_roles=["finance", "ops"]
    )
    assert row == port.TokenRow("f" * 64, "approver", "alice's", 5.0, "alice", ("finance", "ops"))
    assert other.get_token("f" * 64) == row
    store.create_token("g" * 64, "viewer", None, 6.0)
    assert other.get_token("g" * 64) == port.TokenRow("g" * 64, "viewer", None, 6.0, None, ())


_V4_TOKEN = (
    "INSERT INTO token (token_hash, role, name, created_at) VALUES ('old', 'admin', 'before', 1.0)"
)


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_a_version_4_database_gets_the_approval_table_and_keeps_its_tokens(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = store_at_version(dialect, 4, [_V4_TOKEN], tmp_path, request)
    try:
        assert store.schema_version() == len(migrations.scripts(dialect)) >= 5
        assert store.get_token("old") == port.TokenRow("old", "admin", "before", 1.0, None, ())
        req = requested(9)
        store.append([started(9, "p"), req])
        assert store.get_approval(req.event_id).status == "pending"
    finally:
        store.close()


def test_a_run_waiting_for_people_is_not_redriven_until_its_approval_expires(store: Any) -> None:
    """A run whose only activity is a pending approval is idle on purpose: the reconciler
    leaves it alone (no re-decide per tick per waiting run), but once `expires_at` has
    passed it is re-driven, so the expiry is recorded even when the server holding the
    timer is gone."""
    never = requested(81, expires_at=None)
    later = requested(82, expires_at=500.0)
    store.append([started(81, "a"), never])
    store.append([started(82, "b"), later])
    assert store.executions_to_redrive(now=400.0) == []
    assert store.executions_to_redrive(now=501.0) == [82]
    store.append([event(82, ev.APPROVAL_EXPIRED, approval_id=later.event_id, run=1)])
    store.append(
        [
            event(
                81,
                ev.APPROVAL_DECIDED,
                approval_id=never.event_id,
                identity="user:alice",
                decision="deny",
                reason="no",
            )
        ]
    )
    store.append([event(81, ev.APPROVAL_DENIED, approval_id=never.event_id, run=1)])
    # closed approvals: the runs are as any other idle run again
    assert store.executions_to_redrive(now=10_000.0) == [81, 82]
