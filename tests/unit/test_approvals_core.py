"""The approval gate in the pure core (DSL 10.3): requests, votes, quorum, expiry, the
policy and the call re-checked right before the first command, fail closed."""

from __future__ import annotations

from typing import Any

import pytest

from milepost.core import approval_state as ap
from milepost.core import approvals
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core.approval_state import Voter
from tests.unit.sim import Sim, playbook

REFUND = """
workload: {amount: 1200, limit: 5000}
workflow:
  - step: start
    tool: {kind: noop}
    next: [{step: refund}]
  - step: refund
    tool: {kind: http, method: POST, url: "https://pay.example/refunds", json: {amount: "{{ amount }}"}}
    spec:
      approval:
        required: "{{ workload.amount > 1000 }}"
        approvers: [role:finance, user:alice, user:bob]
        quorum: 2
        expires_in: 1h
        policy: {check: "{{ workload.amount <= workload.limit }}", reason: "amount {{ workload.amount }} exceeds the {{ workload.limit }} limit"}
        risk: high
    next: [{step: end}]
  - step: end
    tool: {kind: noop}
"""

ALICE = Voter("user:alice")
BOB = Voter("user:bob")
CAROL = Voter("user:carol", frozenset({"finance"}))


def gated(workload: dict[str, Any] | None = None, body: str = REFUND, **kw: Any) -> Sim:
    sim = Sim(playbook(body), workload, **kw)
    sim.run_all()
    return sim


def pending(sim: Sim) -> ap.Approval:
    (approval,) = sim.state.approvals.values()
    return approval


def vote(
    sim: Sim, voter: Voter, decision: str = "approve", reason: str | None = None
) -> list[ev.Event]:
    return sim.vote(pending(sim).approval_id, voter, decision, reason)


def types(events: list[ev.Event]) -> list[str]:
    return [e.event_type for e in events]


def test_a_gated_step_waits_with_its_rendered_call_and_issues_nothing() -> None:
    sim = gated()
    approval = pending(sim)
    assert sim.live() == []
    assert sim.state.step_status["refund"] == ap.AWAITING_APPROVAL
    assert sim.state.status == st.RUNNING
    (call,) = approval.calls
    assert call["index"] == st.NO_INDEX
    assert call["input"]["tasks"][0]["config"]["json"] == {"amount": 1200}
    assert call["digest"] == approvals.digest(call["input"])
    assert approval.digest == approvals.digest([call["digest"]])
    assert (approval.quorum, approval.risk, approval.expires_at) == (2, "high", 1000.0 + 3600)
    assert sim.wake_at == 1000.0 + 3600  # the expiry is a timer: the tick records it


def test_not_required_runs_at_once() -> None:
    sim = Sim(playbook(REFUND), {"amount": 10})
    assert [c.step for c in sim.live()] == ["start"]
    sim.run_all()
    assert sim.state.status == st.COMPLETED
    assert sim.state.approvals == {}


def test_quorum_two_one_vote_waits_two_grant_and_issue_once() -> None:
    sim = gated()
    assert vote(sim, ALICE) == []
    assert sim.live() == []
    produced = vote(sim, CAROL)
    assert types(produced) == [ev.APPROVAL_GRANTED, ev.COMMAND_ISSUED]
    assert produced[0].payload["approvers"] == ["user:alice", "user:carol"]
    assert pending(sim).status == ap.GRANTED
    sim.run_all()
    assert sim.state.status == st.COMPLETED
    assert sum(1 for e in sim.log if e.event_type == ev.COMMAND_ISSUED and e.step == "refund") == 1


def test_deny_fails_the_step_with_the_denier_and_reason_never_retried() -> None:
    body = REFUND.replace(
        "risk: high", "risk: high\n      retry: {max_attempts: 5, retry_on: [approval, error]}"
    )
    sim = gated(body=body)
    produced = vote(sim, BOB, "deny", "duplicate refund")
    assert types(produced)[:2] == [ev.APPROVAL_DENIED, ev.STEP_EXIT]
    assert sim.state.status == st.FAILED
    assert sim.state.error["kind"] == "approval"
    assert sim.state.error["message"] == "approval rejected by user:bob: duplicate refund"
    assert not any(e.event_type == ev.COMMAND_RETRY_SCHEDULED for e in sim.log)


def test_self_approval_refused_unless_allowed() -> None:
    sim = gated(started_by="user:alice")
    with pytest.raises(approvals.SelfApproval):
        vote(sim, ALICE)
    allowed = gated(
        body=REFUND.replace("risk: high", "risk: high\n        allow_self_approval: true"),
        started_by="user:alice",
    )
    vote(allowed, ALICE)
    assert [v.identity for v in pending(allowed).votes] == ["user:alice"]


def test_a_second_vote_by_the_same_identity_is_refused_and_would_change_nothing() -> None:
    sim = gated()
    vote(sim, ALICE)
    with pytest.raises(approvals.AlreadyVoted):
        vote(sim, ALICE)
    # the same vote slipped into the log some other way: the fold ignores it
    again = sim.decided("refund", pending(sim).approval_id, "user:alice")
    fl.fold(sim.state, [again])
    assert sim.settle() == []
    assert len(pending(sim).votes) == 1 and sim.live() == []


def test_who_may_decide() -> None:
    sim = gated()
    for voter in (Voter("user:mallory"), Voter("user:eve", frozenset({"ops"})), Voter("alice")):
        with pytest.raises(approvals.NotAnApprover):
            vote(sim, voter)
    with pytest.raises(approvals.InvalidDecision):
        vote(sim, ALICE, "maybe")
    with pytest.raises(approvals.ApprovalNotFound):
        approvals.check_vote(sim.state, 12345, ALICE, "approve", sim.now)
    # a forged vote from someone who may not decide changes nothing either
    forged = sim.decided("refund", pending(sim).approval_id, "user:mallory", "deny")
    fl.fold(sim.state, [forged])
    assert sim.settle() == [] and pending(sim).status == ap.PENDING


def test_expiry_before_the_decision() -> None:
    sim = gated()
    vote(sim, ALICE)
    sim.now = 1000.0 + 3600
    with pytest.raises(approvals.ApprovalClosed) as refused:
        vote(sim, CAROL)
    assert refused.value.fields["status"] == ap.EXPIRED
    produced = sim.settle()
    assert types(produced)[:2] == [ev.APPROVAL_EXPIRED, ev.STEP_EXIT]
    assert sim.state.error["message"] == "approval expired after 1h"
    assert sim.state.status == st.FAILED and pending(sim).status == ap.EXPIRED


def test_a_quorum_reached_after_expiry_never_grants() -> None:
    """The votes are in the log but the decision comes after `expires_at` (every process
    was down): expiry is checked first."""
    sim = gated()
    for voter in (ALICE, CAROL):
        approval_id = pending(sim).approval_id
        event = sim.decided("refund", approval_id, voter.identity, roles=sorted(voter.roles))
        fl.fold(sim.state, [event])
    sim.now = 1000.0 + 7200
    produced = sim.settle()
    assert ev.APPROVAL_GRANTED not in types(produced) and ev.COMMAND_ISSUED not in types(produced)
    assert pending(sim).status == ap.EXPIRED and sim.state.status == st.FAILED


def test_policy_false_at_dispatch_invalidates() -> None:
    # the request was made while the policy held; the limit moved before the quorum
    sim = gated()
    vote(sim, ALICE)
    sim.state.workload["limit"] = 1000
    produced = vote(sim, CAROL)
    assert types(produced)[:2] == [ev.APPROVAL_INVALIDATED, ev.STEP_EXIT]
    assert produced[0].payload["cause"] == "policy"
    assert sim.state.error["message"] == "approval invalidated: amount 1200 exceeds the 1000 limit"
    assert not any(e.event_type == ev.COMMAND_ISSUED and e.step == "refund" for e in sim.log)


def test_an_undefined_policy_refuses() -> None:
    body = REFUND.replace(
        'policy: {check: "{{ workload.amount <= workload.limit }}", reason: '
        '"amount {{ workload.amount }} exceeds the {{ workload.limit }} limit"}',
        'policy: "{{ workload.missing.flag }}"',
    )
    sim = gated(body=body)
    vote(sim, ALICE)
    produced = vote(sim, CAROL)
    assert produced[0].event_type == ev.APPROVAL_INVALIDATED
    assert sim.state.status == st.FAILED


def test_the_call_changed_since_it_was_approved_invalidates() -> None:
    sim = gated()
    vote(sim, ALICE)
    sim.state.workload["amount"] = 4000
    produced = vote(sim, CAROL)
    assert produced[0].event_type == ev.APPROVAL_INVALIDATED
    assert produced[0].payload["changed"] == "config.json.amount"
    assert sim.state.error["message"] == (
        "approval invalidated: the call changed since it was approved (config.json.amount)"
    )


def test_cancel_while_waiting_closes_the_approval() -> None:
    sim = gated()
    sim.cancel()
    assert sim.state.status == st.CANCELLED
    assert pending(sim).status == ap.CANCELLED
    with pytest.raises(approvals.ApprovalClosed):
        vote(sim, ALICE)


def test_a_template_error_in_required_fails_the_step_closed() -> None:
    sim = gated(
        body=REFUND.replace(
            'required: "{{ workload.amount > 1000 }}"', 'required: "{{ workload.nope.deeper > 1 }}"'
        )
    )
    assert sim.state.status == st.FAILED
    assert sim.state.error["kind"] == "template"
    assert "spec.approval.required" in sim.state.error["message"]


LOOP = """
workload: {items: [1, 2, 3]}
workflow:
  - step: start
    tool: {kind: noop}
    next: [{step: pay}]
  - step: pay
    loop: {in: "{{ workload.items }}", iterator: n, spec: {mode: parallel, max_in_flight: 2}}
    tool: {kind: http, method: POST, url: "https://pay.example/p/{{ n }}"}
    spec:
      retry: {max_attempts: 3, retry_on: [server_error]}
      approval: {approvers: [user:alice]}
    next: [{step: end}]
  - step: end
    tool: {kind: noop}
"""


def test_a_loop_is_approved_once_with_every_call_and_retries_do_not_ask_again() -> None:
    sim = gated(body=LOOP)
    approval = pending(sim)
    assert [c["index"] for c in approval.calls] == [0, 1, 2]
    assert [c["input"]["tasks"][0]["config"]["url"] for c in approval.calls] == [
        "https://pay.example/p/1",
        "https://pay.example/p/2",
        "https://pay.example/p/3",
    ]
    vote(sim, ALICE)
    assert [c.index for c in sim.live("pay")] == [0, 1]
    first = sim.live("pay")[0]
    sim.report(first, error={"kind": "server_error", "message": "503"})
    if sim.wake_at is not None:
        sim.fire()
    assert {(c.index, c.attempt) for c in sim.live("pay")} == {(0, 2), (1, 1)}
    assert len(sim.state.approvals) == 1  # the retry did not ask again
    sim.run_all()
    assert sim.state.status == st.COMPLETED
    assert sum(e.event_type == ev.APPROVAL_REQUESTED for e in sim.log) == 1


def test_the_work_item_carries_the_approved_digest_and_expiry_and_verify_checks_them() -> None:
    import dataclasses

    from milepost.core.work import work_item

    sim = gated()
    vote(sim, ALICE)
    vote(sim, CAROL)
    (cmd,) = sim.live("refund")
    item = work_item(sim.state, sim.pb, cmd)
    assert item.approved_digest == pending(sim).calls[0]["digest"]
    assert item.approval_expires_at == pending(sim).expires_at == 1000.0 + 3600
    assert approvals.verify(sim.pb, item, sim.now) is None
    changed = dataclasses.replace(item, context={**item.context, "amount": 9999})
    assert approvals.verify(sim.pb, changed, sim.now) == {
        "kind": "approval",
        "message": "approval invalidated before attempt 1: the call changed since it was approved",
        "retryable": False,
        "invalidated": {
            "cause": "changed",
            "reason": "the call changed since it was approved",
            "changed": None,
        },
    }
    # claimed 14 s after the approval expired: the tool does not run
    late = approvals.verify(sim.pb, item, 1000.0 + 3600 + 14.2)
    assert late is not None and late["invalidated"]["cause"] == "expired"
    assert late["message"] == (
        "approval invalidated before attempt 1: the approval expired 14s earlier"
    )
    assert approvals.verify(sim.pb, item, 1000.0 + 3600 - 0.001) is None


def test_secrets_are_redacted_from_the_shown_call() -> None:
    body = REFUND.replace(
        'json: {amount: "{{ amount }}"}',
        'json: {amount: "{{ amount }}"}, headers: {Authorization: "Bearer {{ api_key }}", X-Memo: "{{ keychain.pay }}"}',
    )
    sim = gated({"api_key": "sk-live-0123456789abcdef"}, body=body)
    shown = pending(sim).calls[0]["input"]["tasks"][0]["config"]["headers"]
    assert "sk-live-0123456789abcdef" not in str(pending(sim).calls)
    assert shown["Authorization"] == "***"
    assert shown["X-Memo"] == "{{ keychain.pay }}"  # not known before the attempt


def test_operation_key_is_stable_across_attempts_and_idempotency_key_is_not() -> None:
    from milepost import ids

    assert ids.operation_key(1, "s", 1, None) == ids.operation_key(1, "s", 1, None)
    assert ids.operation_key(1, "s", 1, 0) != ids.operation_key(1, "s", 1, 1)
    assert ids.operation_key(1, "s", 1, None) != ids.operation_key(1, "s", 2, None)
    assert ids.idempotency_key(1, "s", 1, None, 1) != ids.idempotency_key(1, "s", 1, None, 2)


# -- every attempt after the grant (issue 33) ------------------------------------------------

RETRIED = """
workflow:
  - step: start
    tool: {kind: noop}
    next: {spec: {mode: inclusive}, arcs: [{step: writer}, {step: pay}]}
  - step: writer
    tool: {kind: noop}
  - step: pay
    tool: {kind: http, method: POST, url: "https://pay.example/p", json: {amount: "{{ ctx.amount | default(100) }}"}}
    spec:
      retry: {max_attempts: 5, retry_on: [server_error, lost], delay: 10}
      approval:
        approvers: [user:alice]
        expires_in: 1m
        policy: {check: "{{ not (ctx.frozen | default(false)) }}", reason: "payments are frozen"}
"""


def granted(body: str = RETRIED) -> Sim:
    """RETRIED (or `body`) with its approval granted and `pay`'s attempt 1 out."""
    sim = Sim(playbook(body))
    sim.complete("start")
    vote(sim, ALICE)
    assert pending(sim).status == ap.GRANTED
    return sim


def pay_issued(sim: Sim) -> list[tuple[int, int]]:
    return [
        (e.payload["index"], e.payload["attempt"])
        for e in sim.log
        if e.event_type == ev.COMMAND_ISSUED and e.step == "pay"
    ]


def invalidated(sim: Sim) -> dict[str, Any]:
    (event,) = [e for e in sim.log if e.event_type == ev.APPROVAL_INVALIDATED]
    return dict(event.payload)


def failed_with(sim: Sim, message: str) -> None:
    assert sim.state.status == st.FAILED
    assert sim.state.error is not None
    assert (sim.state.error["step"], sim.state.error["kind"]) == ("pay", "approval")
    assert sim.state.error["message"] == message
    assert pending(sim).status == ap.INVALIDATED


def test_a_retry_after_the_approval_expired_is_never_issued() -> None:
    """The issue's case: attempt 1 failed, its retry came due 14 s after `expires_at`."""
    sim = granted()
    sim.complete("writer")
    sim.now = 1000.0 + 56  # attempt 1 fails 4 s before the expiry; its retry waits 10 s
    sim.report(sim.live("pay")[0], error={"kind": "server_error", "message": "503"})
    assert sim.live("pay") == [] and sim.wake_at == 1000.0 + 66
    sim.fire()
    assert pay_issued(sim) == [(-1, 1)]
    refusal = invalidated(sim)
    assert (refusal["cause"], refusal["index"], refusal["attempt"]) == ("expired", -1, 2)
    assert refusal["reason"] == "the approval expired 6s earlier"
    failed_with(sim, "approval invalidated before attempt 2: the approval expired 6s earlier")
    assert not any(e.event_type == ev.COMMAND_RETRY_SCHEDULED for e in sim.log[-3:])


def test_a_policy_turned_false_before_a_retry_refuses_it() -> None:
    sim = granted()
    sim.complete("writer", ctx={"frozen": True})
    sim.report(sim.live("pay")[0], error={"kind": "server_error", "message": "503"})
    sim.fire()
    assert pay_issued(sim) == [(-1, 1)]
    assert (invalidated(sim)["cause"], invalidated(sim)["reason"]) == (
        "policy",
        "payments are frozen",
    )
    failed_with(sim, "approval invalidated before attempt 2: payments are frozen")


def test_a_changed_call_is_not_reissued_after_a_lost_lease() -> None:
    sim = granted()
    sim.complete("writer", ctx={"amount": 9000})
    sim.lose(sim.live("pay")[0])
    sim.fire()
    assert pay_issued(sim) == [(-1, 1)]
    refusal = invalidated(sim)
    assert (refusal["cause"], refusal["changed"]) == ("changed", "config.json.amount")
    failed_with(
        sim,
        "approval invalidated before attempt 2: the call changed since it was approved "
        "(config.json.amount)",
    )


def test_a_retry_the_approval_still_covers_is_issued_without_asking_again() -> None:
    sim = granted()
    sim.complete("writer", ctx={"other": 1})  # a ctx write neither the call nor policy reads
    sim.report(sim.live("pay")[0], error={"kind": "server_error", "message": "503"})
    sim.fire()
    sim.lose(sim.live("pay")[0])
    sim.fire()
    assert pay_issued(sim) == [(-1, 1), (-1, 2), (-1, 3)]
    sim.run_all()
    assert sim.state.status == st.COMPLETED and pending(sim).status == ap.GRANTED
    assert sum(e.event_type == ev.APPROVAL_REQUESTED for e in sim.log) == 1


def test_a_later_loop_iteration_after_the_expiry_is_never_issued_and_siblings_finish() -> None:
    body = RETRIED.replace(
        "  - step: pay\n",
        "  - step: pay\n    loop: {in: [1, 2, 3], iterator: n, spec: {mode: parallel, "
        "max_in_flight: 2}}\n",
    )
    sim = granted(body)
    sim.complete("writer")
    first, second = sim.live("pay")
    sim.now = 1000.0 + 61
    sim.report(first, {"ok": 1})  # its slot frees after the expiry: iteration 2 is refused
    assert pay_issued(sim) == [(0, 1), (1, 1)]
    assert (invalidated(sim)["index"], invalidated(sim)["cause"]) == (2, "expired")
    assert sim.state.status == st.RUNNING, "iteration 1 is still out"
    sim.report(second, {"ok": 2})
    failed_with(
        sim, "iteration 2: approval invalidated before attempt 1: the approval expired 1s earlier"
    )


def test_an_attempt_refused_on_its_side_invalidates_the_approval() -> None:
    """The worker refused to run the tool (claimed after the expiry): the approval reads
    invalidated and the step fails, never retried."""
    from milepost.core.work import work_item

    sim = granted()
    sim.complete("writer")
    sim.now = 1000.0 + 75
    item = work_item(sim.state, sim.pb, sim.live("pay")[0])
    error = approvals.verify(sim.pb, item, sim.now)
    assert error is not None
    produced = sim.report(sim.live("pay")[0], error=error)
    assert types(produced)[:2] == [ev.APPROVAL_INVALIDATED, ev.STEP_EXIT]
    refusal = invalidated(sim)
    assert (refusal["cause"], refusal["attempt"], refusal["reason"]) == (
        "expired",
        1,
        "the approval expired 15s earlier",
    )
    failed_with(sim, "approval invalidated before attempt 1: the approval expired 15s earlier")
    assert pay_issued(sim) == [(-1, 1)]
