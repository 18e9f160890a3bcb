"""What `milepost run` shows of a run's approvals, fed with the events of its log: the
pending request (the call, risk, who decides, votes, time left, how to decide), the votes
as the fold counts them, and how each approval closed."""

from __future__ import annotations

import pytest
from rich.console import Console

from milepost.cli import output, progress
from milepost.core import approval_state as ap
from milepost.core import state as st
from milepost.core.approval_state import Voter
from milepost.engine import summaries
from tests.unit.sim import Sim, playbook

REFUND = """
workload: {amount: 1200}
workflow:
  - step: refund
    loop: {in: "{{ [1, 2, 3, 4] }}", iterator: n}
    tool:
      kind: http
      method: POST
      url: "https://pay.example/refunds"
      json: {amount: "{{ workload.amount }}", part: "{{ n }}"}
    spec:
      approval: {approvers: [role:finance, user:alice], quorum: 2, expires_in: 1h, risk: high}
    next: [{step: end}]
  - step: end
    tool:
      kind: python
      code: |
        a = 1
        b = 2
        c = 3
        result = a + b + c
"""
CAROL = Voter("user:carol", frozenset({"finance"}))


def waiting() -> tuple[Sim, int]:
    sim = Sim(playbook(REFUND), started_by="user:alice")
    (approval_id,) = sim.state.approvals
    return sim, approval_id


def vote(
    sim: Sim, approval_id: int, voter: Voter, decision: str = "approve", reason: str | None = None
) -> None:
    sim.vote(approval_id, voter, decision, reason)


def shown(sim: Sim, now: float, db: str | None = "runs/m.db") -> str:
    view = progress.Progress(db, clock=lambda: now)
    for event in sim.log:
        view(event)
    console = Console(record=True, width=200, color_system=None)
    console.print(view)
    return console.export_text()


def test_a_pending_approval_shows_the_call_risk_deciders_votes_time_left_and_commands() -> None:
    sim, aid = waiting()
    text = shown(sim, now=1000.0 + 61)
    assert f"approval {aid} · step refund · execution 77 · risk high" in text
    assert "[0] http POST https://pay.example/refunds" in text
    assert 'json: {"amount": 1200, "part": 1}' in text
    assert "… and 1 more calls of this loop" in text  # three of four shown
    assert "who may decide: role:finance, user:alice · quorum 2 · votes 0/2" in text
    assert "time left: 58m 59s" in text
    assert f"milepost approve {aid} --db runs/m.db" in text
    assert f'milepost deny {aid} --reason "..." --db runs/m.db' in text
    assert "AWAITING_APPROVAL" in text


def test_without_a_db_option_the_commands_name_none_and_a_path_is_quoted() -> None:
    assert progress.decide_commands(5, None) == [
        "milepost approve 5",
        'milepost deny 5 --reason "..."',
    ]
    assert progress.resume_command(7, "my runs/m.db") == "milepost resume 7 --db 'my runs/m.db'"


def test_votes_count_as_the_fold_counts_them() -> None:
    sim, aid = waiting()
    # the one who started the run, and someone who is no approver: neither counts
    for identity, roles in (("user:alice", []), ("user:mallory", [])):
        sim.log.append(sim.decided("refund", aid, identity, roles=roles))
    vote(sim, aid, CAROL, reason="ok")
    text = shown(sim, now=sim.now)
    assert "votes 1/2 (user:carol approved)" in text
    assert sim.state.approvals[aid].status == ap.PENDING


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        ("deny", "denied by user:carol: too much"),
        ("expire", "expired before the quorum was reached"),
    ],
)
def test_a_closed_approval_says_how_it_closed(decision: str, expected: str) -> None:
    sim, aid = waiting()
    if decision == "deny":
        vote(sim, aid, CAROL, "deny", "too much")
    else:
        sim.now += 3601
        sim.settle()
    requested_at = sim.state.approvals[aid].requested_at
    lines = progress.ApprovalLines(
        Console(record=True, width=200, color_system=None), None, clock=lambda: requested_at
    )
    for event in sim.log:
        lines(event)
    text = lines.console.export_text()
    assert f"approval {aid} (refund): {expected}" in text
    assert "time left: 1h 00m" in text  # the request, printed once, as of the clock
    assert f"approval {aid} (refund): {expected}" in shown(sim, now=sim.now)


def test_a_pending_approval_of_a_step_that_stops_waiting_is_cancelled() -> None:
    sim, aid = waiting()
    sim.cancel()
    assert sim.state.status == st.CANCELLED
    assert f"approval {aid} (refund): cancelled: the step stopped waiting" in shown(sim, sim.now)


def test_code_is_shown_by_its_first_lines() -> None:
    task = {
        "kind": "python",
        "config": {"code": "a = 1\nb = 2\nc = 3\nresult = a"},
        "input": {"x": 1},
    }
    assert progress.task_lines(task) == [
        "python",
        "  a = 1",
        "  b = 2",
        "  c = 3",
        "  … 1 more lines",
        '  input: {"x": 1}',
    ]


@pytest.mark.parametrize(
    ("left", "text"),
    [
        (None, "no expiry"),
        (-1, "expired"),
        (0, "expired"),
        (12, "12s"),
        (250, "4m 10s"),
        (3600 + 300, "1h 05m"),
        (2 * 86400 + 7200 + 5, "2d 2h"),
    ],
)
def test_time_left(left: float | None, text: str) -> None:
    now = 1_000_000.0
    assert output.time_left(None if left is None else now + left, now) == text
    if left is not None:
        assert output.time_left(output.iso(now + left), now) == text  # the wire's ISO form


@pytest.mark.parametrize(
    ("how", "status", "outcome"),
    [
        ("pending", "pending", None),
        ("deny", "denied", "denied by user:carol: too much"),
        ("expire", "expired", "approval expired after 1h"),
        ("policy", "invalidated", "approval invalidated: over 1000"),
        ("grant", "granted", "granted by user:carol, user:bob"),
    ],
)
def test_the_summary_of_a_gated_step_carries_its_approval(
    how: str, status: str, outcome: str | None
) -> None:
    body = REFUND.replace(
        "risk: high}",
        'risk: high, policy: {check: "{{ workload.amount < 1000 }}", reason: over 1000}}',
    )
    sim = Sim(playbook(body if how == "policy" else REFUND), started_by="user:alice")
    (aid,) = sim.state.approvals
    if how == "deny":
        vote(sim, aid, CAROL, "deny", "too much")
    elif how == "expire":
        sim.now += 3600
        sim.settle()
    elif how in ("policy", "grant"):
        vote(sim, aid, CAROL)
        vote(sim, aid, Voter("user:bob", frozenset({"finance"})))
    summary = summaries.execution_summary(sim.state)["steps"]["refund"]["approval"]
    assert (summary["approval_id"], summary["status"], summary["outcome"]) == (
        str(aid),
        status,
        outcome,
    )
    assert (summary["risk"], summary["quorum"]) == ("high", 2)
    assert summary["expires_at"] == output.iso(1000.0 + 3600)
    line = output.approval_line("refund", summary, now=1000.0 + 600)
    if outcome is None:
        assert line == (
            f"approval {aid} (step refund): pending · risk high · votes 0/2 · who may "
            "decide: role:finance, user:alice · time left: 50m 00s"
        )
    else:
        assert line == f"approval {aid} (step refund): {outcome}"


def test_a_granted_approval_a_later_iteration_outlived_reads_invalidated() -> None:
    """Granted, then the loop's next iteration came due after `expires_at`: `milepost run`,
    `status` and the summary say the approval was invalidated, and why."""
    sim = Sim(playbook(REFUND.replace("iterator: n}", "iterator: n, spec: {max_in_flight: 1}}")))
    (aid,) = sim.state.approvals
    vote(sim, aid, CAROL)
    vote(sim, aid, Voter("user:bob", frozenset({"finance"})))
    sim.now += 3600 + 14
    sim.run_all()  # iteration 0 reports after the expiry: iteration 1 is never issued
    assert sim.state.status == st.FAILED
    why = "the approval expired 14s earlier"
    assert f"approval {aid} (refund): invalidated before attempt 1: {why}" in shown(sim, sim.now)
    summary = summaries.execution_summary(sim.state)["steps"]["refund"]["approval"]
    assert (summary["status"], summary["outcome"]) == (
        "invalidated",
        f"iteration 1: approval invalidated before attempt 1: {why}",
    )
