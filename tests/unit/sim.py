"""A tiny driver for the pure core: events in, decisions out, no database, no event loop."""

from __future__ import annotations

import itertools
import textwrap
from typing import Any

from milepost.core import approvals, cancellation
from milepost.core import decide as dc
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core.approval_state import Voter
from milepost.playbook import load, model

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: t}\n"


def playbook(body: str) -> model.Playbook:
    return load.load_text(HEADER + textwrap.dedent(body), source="test.yaml")


class Sim:
    """Settles decisions with the orchestrator's loop (`decide.settle`) and completes
    commands on request."""

    def __init__(
        self,
        pb: model.Playbook,
        workload: dict[str, Any] | None = None,
        now: float = 1000.0,
        started_by: str | None = None,
    ) -> None:
        self.pb = pb
        self.now = now
        self._ids = itertools.count(1)
        self.log: list[ev.Event] = []
        started = ev.new_event(
            self.new_id(),
            77,
            ev.EXECUTION_STARTED,
            now,
            payload={
                "path": pb.path,
                "version": 1,
                "workload": {**pb.workload, **(workload or {})},
                "entry_step": pb.entry_step,
                **({"started_by": started_by} if started_by else {}),
            },
        )
        self.state = fl.fold(None, [started])
        self.log.append(started)
        self.settle()

    def new_id(self) -> int:
        return next(self._ids)

    def vote(
        self, approval_id: int, voter: Voter, decision: str = "approve", reason: str | None = None
    ) -> list[ev.Event]:
        """`voter`'s decision on the approval, checked as a route checks it, folded and
        logged; what settling then produced."""
        event = approvals.vote_event(
            self.state, approval_id, voter, decision, reason, self.now, self.new_id()
        )
        fl.fold(self.state, [event])
        self.log.append(event)
        return self.settle()

    def decided(
        self,
        step: str,
        approval_id: int,
        identity: str,
        decision: str = "approve",
        roles: list[str] | None = None,
    ) -> ev.Event:
        """`approval.decided` made by hand, checked by no one: a vote forged, replayed or
        let in some other way than `approvals.vote_event`. Not folded: the test does."""
        payload: dict[str, Any] = {"approval_id": approval_id, "identity": identity}
        if roles is not None:
            payload["roles"] = roles
        payload["decision"] = decision
        return ev.new_event(
            self.new_id(), 77, ev.APPROVAL_DECIDED, self.now, step=step, payload=payload
        )

    def settle(self) -> list[ev.Event]:
        """Ask decide until it has nothing more to say; returns what it produced."""
        settled = dc.settle(self.state, self.pb, self.now, self.new_id, limit=1000)
        self.wake_at = settled.wake_at
        self.log.extend(settled.events)
        return settled.events

    def live(self, step: str | None = None) -> list[st.Command]:
        cmds = sorted(self.state.commands.values(), key=lambda c: c.command_id)
        return [c for c in cmds if step is None or c.step == step]

    def report(
        self,
        cmd: st.Command,
        result: Any = None,
        *,
        error: dict[str, Any] | None = None,
        ctx: dict[str, Any] | None = None,
    ) -> list[ev.Event]:
        payload: dict[str, Any] = {
            "command_id": cmd.command_id,
            "run": cmd.run,
            "index": cmd.index,
            "attempt": cmd.attempt,
        }
        if error is None:
            payload.update(result=result, ctx=ctx or {})
            etype = ev.COMMAND_COMPLETED
        else:
            payload.update(error=error)
            etype = ev.COMMAND_FAILED
        event = ev.new_event(self.new_id(), 77, etype, self.now, step=cmd.step, payload=payload)
        fl.fold(self.state, [event])
        self.log.append(event)
        return self.settle()

    def lose(self, cmd: st.Command) -> list[ev.Event]:
        """The command's lease expired without a report (the reconciler's event)."""
        return self.fold_and_settle(ev.COMMAND_LEASE_EXPIRED, cmd.step, command_id=cmd.command_id)

    def cancel(self) -> list[ev.Event]:
        return self.fold_and_settle(ev.EXECUTION_CANCEL_REQUESTED, None)

    def fire(self) -> list[ev.Event]:
        """The timer decide asked for went off: a retry's, or the end of a cancel's grace,
        when the engine abandons what still runs (`Lifecycle.wake`)."""
        assert self.wake_at is not None, "no timer set"
        self.now = max(self.now, self.wake_at)
        if cancellation.overdue(self.state, self.pb, self.now):
            abandoned = cancellation.abandoned(self.state, self.pb, self.now, self.new_id, {})
            fl.fold(self.state, abandoned)
            self.log.extend(abandoned)
        return self.settle()

    def fold_and_settle(self, event_type: str, step: str | None, **payload: Any) -> list[ev.Event]:
        event = ev.new_event(self.new_id(), 77, event_type, self.now, step=step, payload=payload)
        fl.fold(self.state, [event])
        self.log.append(event)
        return self.settle()

    def complete(self, step: str, result: Any = None, **kw: Any) -> list[ev.Event]:
        cmds = self.live(step)
        assert cmds, f"no live command for {step}: {self.live()}"
        return self.report(cmds[0], result, **kw)

    def run_all(self, results: dict[str, Any] | None = None, limit: int = 500) -> None:
        """Complete every live command (oldest first) until none is left."""
        for _ in range(limit):
            cmds = self.live()
            if not cmds:
                return
            cmd = cmds[0]
            value = (results or {}).get(cmd.step, {"step": cmd.step, "index": cmd.index})
            self.report(cmd, value(cmd) if callable(value) else value)
        raise AssertionError("run did not settle")

    def types(self, events: list[ev.Event]) -> list[tuple[str, str | None]]:
        return [(e.event_type, e.step) for e in events]
