"""A gated tool call never runs unless a current approval covers that exact attempt (DSL
10.3, issue 33): a property over histories of the pure core.

A history: the run requests its approval, then, in an order hypothesis chooses, people
approve, time passes, a parallel step writes the context (the amount the call sends, or
the freeze the policy reads), and workers run, fail, or lose attempts of the gated step,
which `spec.retry` retries. A worker is modelled as the attempt runner is: it builds the
work item when it claims the command and checks it (`approvals.verify`) before the tool
would run.

The oracle knows the approved call (amount 100: nothing writes before the request), so it
checks what the engine decided against the facts, not against the engine's own checks:

- every attempt issued was issued before `expires_at`, with the call unchanged and the
  policy true at that moment;
- every tool run started before `expires_at`, with the call it runs the approved one;
- every refusal (decide's, or the attempt's own) names a cause that held at that moment,
  nothing is issued after it, and the step run ends FAILED with error kind `approval`,
  its approval invalidated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as hs

from milepost.core import approval_state as ap
from milepost.core import approvals
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core.approval_state import Voter
from milepost.core.work import work_item
from tests.unit.sim import Sim, playbook

APPROVED = 100
"""The amount the call sends when nothing changed it: the one people approve."""
EXPIRES_IN = 60.0
WRITES = [{"amount": 9000}, {"amount": APPROVED}, {"frozen": True}, {"frozen": False}]


def _playbook(loop: str | None) -> str:
    loop_line = f"    loop: {{in: [1, 2, 3], iterator: n, spec: {loop}}}\n" if loop else ""
    return f"""
workflow:
  - step: start
    tool: {{kind: noop}}
    next: {{spec: {{mode: inclusive}}, arcs: [{{step: writer}}, {{step: pay}}]}}
  - step: writer
    loop: {{in: [1, 2, 3, 4, 5, 6, 7, 8], iterator: w, spec: {{mode: sequential}}}}
    tool: {{kind: noop}}
  - step: pay
{loop_line}    tool: {{kind: http, method: POST, url: "https://pay.example/p", json: {{amount: "{{{{ ctx.amount | default({APPROVED}) }}}}"}}}}
    spec:
      retry: {{max_attempts: 50, retry_on: [server_error, lost], delay: 5}}
      approval:
        approvers: [user:alice]
        expires_in: {EXPIRES_IN:g}
        policy: {{check: "{{{{ not (ctx.frozen | default(false)) }}}}", reason: "payments are frozen"}}
"""


@dataclass
class World:
    """The history as the oracle saw it."""

    sim: Sim
    expires_at: float
    seen: int = 0
    """Events of the log already checked."""
    refused: list[str] = field(default_factory=list)
    """The cause of every refused attempt."""
    ran: int = 0

    def amount(self) -> Any:
        return self.sim.state.ctx.get("amount", APPROVED)

    def frozen(self) -> bool:
        return bool(self.sim.state.ctx.get("frozen"))

    def approval(self) -> ap.Approval:
        (approval,) = self.sim.state.approvals.values()
        return approval

    def check_new_events(self) -> None:
        """What the last moves appended, checked against the facts of this moment (the
        context does not change within a settle: only reports write it)."""
        now = self.sim.now
        for event in self.sim.log[self.seen :]:
            if event.event_type == ev.COMMAND_ISSUED and event.step == "pay":
                assert not self.refused, "an attempt was issued after the approval was refused"
                assert now < self.expires_at, f"issued {now - self.expires_at}s after expiry"
                assert self.amount() == APPROVED, "issued with a call not the approved one"
                assert not self.frozen(), "issued while the policy was false"
            elif event.event_type == ev.APPROVAL_INVALIDATED and "attempt" in event.payload:
                cause = event.payload["cause"]
                if not self.refused:  # decide's own refusal, before issuing the attempt
                    assert {
                        "expired": now >= self.expires_at,
                        "changed": self.amount() != APPROVED,
                        "policy": self.frozen(),
                    }[cause], f"refused for {cause}, which did not hold"
                    self.refused.append(cause)
        self.seen = len(self.sim.log)

    def run(self, cmd: st.Command, error: dict[str, Any] | None) -> None:
        """A worker claims `cmd` now and runs it as the attempt runner does."""
        item = work_item(self.sim.state, self.sim.pb, cmd)
        refusal = approvals.verify(self.sim.pb, item, self.sim.now)
        if refusal is not None:
            cause = refusal["invalidated"]["cause"]
            sent = item.context["ctx"].get("amount", APPROVED)
            assert {"expired": self.sim.now >= self.expires_at, "changed": sent != APPROVED}[
                cause
            ], f"the attempt refused for {cause}, which did not hold"
            self.refused.append(cause)
            self.sim.report(cmd, error=refusal)
            return
        # the tool runs: the approval must cover this exact call, now
        assert self.sim.now < self.expires_at, "the tool ran after the approval expired"
        assert item.context["ctx"].get("amount", APPROVED) == APPROVED, "ran a changed call"
        self.ran += 1
        self.sim.report(cmd, {"paid": cmd.index}, error=error)


def _moves(w: World) -> list[tuple[Any, ...]]:
    sim = w.sim
    moves: list[tuple[Any, ...]] = [("wait", dt) for dt in (3.0, 11.0, 25.0)]
    if w.approval().status == ap.PENDING:
        moves.append(("vote",))
    for cmd in sim.live("writer"):
        moves += [("write", cmd, writes) for writes in WRITES]
    for cmd in sim.live("pay"):
        moves += [("run", cmd, None), ("run", cmd, {"kind": "server_error"}), ("lose", cmd)]
    if sim.wake_at is not None:
        moves.append(("fire",))
    return moves


def _move(w: World, move: tuple[Any, ...]) -> None:
    sim, kind = w.sim, move[0]
    if kind == "wait":
        sim.now += move[1]
        sim.settle()
    elif kind == "vote":
        aid = w.approval().approval_id
        event = approvals.vote_event(
            sim.state, aid, Voter("user:alice"), "approve", None, sim.now, sim.new_id()
        )
        fl.fold(sim.state, [event])
        sim.log.append(event)
        sim.settle()
    elif kind == "write":
        sim.report(move[1], None, ctx=move[2])
    elif kind == "run":
        w.run(move[1], move[2])
    elif kind == "lose":
        sim.lose(move[1])
    else:
        sim.fire()
    w.check_new_events()


@settings(max_examples=200, deadline=None)
@given(
    loop=hs.sampled_from([None, "{mode: sequential}", "{mode: parallel, max_in_flight: 2}"]),
    data=hs.data(),
)
def test_a_gated_call_runs_only_while_a_current_approval_covers_that_attempt(
    loop: str | None, data: hs.DataObject
) -> None:
    sim = Sim(playbook(_playbook(loop)))
    sim.complete("start")
    (approval,) = sim.state.approvals.values()
    assert approval.expires_at == sim.now + EXPIRES_IN
    w = World(sim, expires_at=approval.expires_at)
    w.check_new_events()
    for _ in range(30):
        if sim.state.terminal:
            break
        _move(w, data.draw(hs.sampled_from(_moves(w))))
    # then every worker succeeds and nothing else changes: the run must end
    for _ in range(200):
        if sim.state.terminal:
            break
        if sim.live("pay"):
            _move(w, ("run", sim.live("pay")[0], None))
        elif sim.live("writer"):
            _move(w, ("write", sim.live("writer")[0], {}))
        elif sim.wake_at is not None:
            _move(w, ("fire",))
        else:
            _move(w, ("vote",))
    assert sim.state.terminal
    if w.refused:
        assert sim.state.status == st.FAILED
        assert sim.state.error is not None
        assert (sim.state.error["step"], sim.state.error["kind"]) == ("pay", "approval")
        assert w.approval().status == ap.INVALIDATED
    elif w.approval().status == ap.GRANTED:
        assert sim.state.status == st.COMPLETED, sim.state.error
