"""What a person sees while `milepost run` or `resume` drives a run: the live table of
steps, and under it each approval the run waits for (what the tool will do, the risk, who
may decide and the votes so far, the time left, and the commands that decide it from
another terminal). Off a terminal (`--json`, a pipe) the same approvals are printed as
lines, once per change, instead of a live display.

Both are fed with the events of the log in order (`EmbeddedEngine.subscribe`), including
the votes other processes append: an approval here is what its events say, with votes
counted as the fold counts them (`core.approval_state`).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from milepost.cli.output import short, time_left
from milepost.core import approval_state as ap
from milepost.core import events as ev

CALLS_SHOWN = 3
"""A loop step's calls shown one by one; the rest are counted."""
CODE_LINES = 3
"""Lines of a step's code (python, shell, SQL) shown."""
RISK_COLOURS = {"high": "bold red", "medium": "yellow", "low": "green"}
_OUTCOMES = {
    ev.APPROVAL_GRANTED: ap.GRANTED,
    ev.APPROVAL_DENIED: ap.DENIED,
    ev.APPROVAL_EXPIRED: ap.EXPIRED,
    ev.APPROVAL_INVALIDATED: ap.INVALIDATED,
}
_PAST = {ap.APPROVE: "approved", ap.DENY: "denied"}
_ENDS = frozenset({ev.EXECUTION_COMPLETED, ev.EXECUTION_FAILED, ev.EXECUTION_CANCELLED})


@dataclass(slots=True)
class Tracked:
    """One approval as its events tell it, and how it closed (`outcome`, for people)."""

    execution_id: int
    approval: ap.Approval
    outcome: str | None = None


class Approvals:
    """The approvals of the runs shown, folded from their events."""

    def __init__(self) -> None:
        self.items: dict[int, Tracked] = {}

    def see(self, event: ev.Event) -> list[Tracked]:
        """Fold one event; the approvals it changed."""
        kind, p = event.event_type, event.payload
        if kind == ev.APPROVAL_REQUESTED:
            approval = requested(event)
            opened = self.items[approval.approval_id] = Tracked(event.execution_id, approval)
            return [opened]
        # a granted approval reads invalidated when an attempt after the grant was refused
        tracked = self._open(p.get("approval_id"), invalidating=kind == ev.APPROVAL_INVALIDATED)
        if kind == ev.APPROVAL_DECIDED:
            if tracked is None or not _counts(tracked.approval, p):
                return []
            tracked.approval.votes.append(
                ap.Vote(str(p["identity"]), str(p["decision"]), p.get("reason"), event.created_at)
            )
            return [tracked]
        if kind in _OUTCOMES:
            if tracked is None:
                return []
            tracked.approval.status = _OUTCOMES[kind]
            tracked.outcome = outcome(kind, p)
            return [tracked]
        if kind != ev.STEP_EXIT and kind not in _ENDS:
            return []
        # the step stopped waiting otherwise (a cancel, the run failing elsewhere)
        closed = [
            t
            for t in self.items.values()
            if t.execution_id == event.execution_id
            and t.approval.status == ap.PENDING
            and (kind in _ENDS or t.approval.step == event.step)
        ]
        for tracked in closed:
            tracked.approval.status = ap.CANCELLED
            tracked.outcome = "cancelled: the step stopped waiting"
        return closed

    def _open(self, approval_id: Any, *, invalidating: bool) -> Tracked | None:
        try:
            tracked = self.items.get(int(approval_id))
        except (TypeError, ValueError):
            return None
        open_ = (ap.PENDING, ap.GRANTED) if invalidating else (ap.PENDING,)
        return tracked if tracked is not None and tracked.approval.status in open_ else None


def requested(event: ev.Event) -> ap.Approval:
    """The approval an `approval.requested` event opens."""
    p = event.payload
    expires_at, expires_in = p.get("expires_at"), p.get("expires_in")
    return ap.Approval(
        approval_id=int(p.get("approval_id", event.event_id)),
        step=event.step or "",
        run=int(p.get("run") or 1),
        requested_at=event.created_at,
        approvers=tuple(p.get("approvers") or ()),
        quorum=int(p.get("quorum") or 1),
        expires_at=None if expires_at is None else float(expires_at),
        expires_in=None if expires_in is None else float(expires_in),
        risk=str(p.get("risk") or "medium"),
        allow_self_approval=bool(p.get("allow_self_approval")),
        started_by=p.get("started_by"),
        digest=str(p.get("digest") or ""),
        calls=list(p.get("calls") or []),
        policy=p.get("policy"),
    )


def _counts(approval: ap.Approval, vote: dict[str, Any]) -> bool:
    """Whether the fold counts this vote (the same checks as `approval_state.apply_decided`)."""
    voter = ap.Voter(str(vote.get("identity") or ""), frozenset(vote.get("roles") or ()))
    return (
        vote.get("decision") in ap.DECISIONS
        and ap.may_decide(approval, voter)
        and not ap.is_self_approval(approval, voter)
        and not ap.has_voted(approval, voter.identity)
    )


def outcome(kind: str, payload: dict[str, Any]) -> str:
    """How an approval closed, in a few words."""
    if kind == ev.APPROVAL_GRANTED:
        return "granted by " + ", ".join(payload.get("approvers") or [])
    if kind == ev.APPROVAL_DENIED:
        reason = payload.get("reason")
        return f"denied by {payload.get('by')}" + (f": {reason}" if reason else "")
    if kind == ev.APPROVAL_EXPIRED:
        return "expired before the quorum was reached"
    reason = payload.get("reason") or "the call or the policy changed"
    if payload.get("attempt") is not None:  # after the grant, before a later attempt
        return f"invalidated before attempt {payload['attempt']}: {reason}"
    return f"invalidated: {reason}"


# -- what a pending approval shows ---------------------------------------------------------


def decide_commands(approval_id: int, db: str | None) -> list[str]:
    """The commands that decide an approval from another terminal, on the same database."""
    where = f" --db {shlex.quote(db)}" if db else ""
    return [
        f"milepost approve {approval_id}{where}",
        f'milepost deny {approval_id} --reason "..."{where}',
    ]


def resume_command(execution_id: int, db: str | None) -> str:
    return f"milepost resume {execution_id}" + (f" --db {shlex.quote(db)}" if db else "")


def call_lines(approval: ap.Approval) -> list[str]:
    """What the tool will do: each command's rendered call, shortened."""
    lines: list[str] = []
    for call in approval.calls[:CALLS_SHOWN]:
        index = int(call.get("index", -1))
        prefix = "" if index < 0 else f"[{index}] "
        tasks = (call.get("input") or {}).get("tasks") or []
        for task in tasks:
            first, *rest = task_lines(task)
            lines.append(prefix + first)
            lines.extend(" " * len(prefix) + line for line in rest)
    if len(approval.calls) > CALLS_SHOWN:
        lines.append(f"… and {len(approval.calls) - CALLS_SHOWN} more calls of this loop")
    return lines


def task_lines(task: dict[str, Any]) -> list[str]:
    """One task of a call: its kind and what identifies the call, then the rest shortened."""
    kind = str(task.get("kind") or "?")
    config = dict(task.get("config") or {})
    config.pop("kind", None)
    if kind == "http":
        head = [f"http {str(config.pop('method', 'GET')).upper()} {config.pop('url', '')}"]
    elif kind == "playbook":
        head = [f"playbook {config.pop('path', '')}"]
    else:
        head = [kind]
        for key in ("code", "command", "query"):
            if isinstance(config.get(key), str):
                code = config.pop(key).strip().splitlines()
                head += ["  " + line for line in code[:CODE_LINES]]
                if len(code) > CODE_LINES:
                    head.append(f"  … {len(code) - CODE_LINES} more lines")
                break
    head += [f"  {key}: {short(value, 80)}" for key, value in config.items()]
    if task.get("input"):
        head.append(f"  input: {short(task['input'], 80)}")
    return head


def vote_line(approval: ap.Approval) -> str:
    approved = len(approval.approvals)
    line = f"votes {approved}/{approval.quorum}"
    if approval.votes:
        line += " (" + ", ".join(f"{v.identity} {_PAST[v.decision]}" for v in approval.votes) + ")"
    return line


def pending_lines(tracked: Tracked, db: str | None, now: float) -> list[Text]:
    """The block of a pending approval, its time left as of `now`."""
    a = tracked.approval
    title = Text(f"approval {a.approval_id}", style="bold")
    title.append(f" · step {a.step} · execution {tracked.execution_id} · risk ")
    title.append(a.risk, style=RISK_COLOURS.get(a.risk, ""))
    lines = [title, Text("  will run:")]
    lines += [Text("    " + line) for line in call_lines(a)]
    lines.append(
        Text(f"  who may decide: {', '.join(a.approvers)} · quorum {a.quorum} · {vote_line(a)}")
    )
    lines.append(Text(f"  time left: {time_left(a.expires_at, now)}"))
    lines.append(Text("  decide from another terminal:"))
    lines += [Text("    " + command) for command in decide_commands(a.approval_id, db)]
    return lines


# -- the two displays ----------------------------------------------------------------------


class Progress:
    """A live table of steps with the approvals under it, fed with events in log order.
    The `Live` display renders it afresh on each of its refreshes (not on each event: a
    big loop makes thousands), so the time left counts down between events too."""

    def __init__(self, db: str | None = None, clock: Callable[[], float] = time.time) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.approvals = Approvals()
        self.db = db
        self.clock = clock

    def table(self) -> Table:
        table = Table(title="milepost", expand=False)
        for col in ("step", "status", "runs", "done"):
            table.add_column(col)
        for name, row in self.rows.items():
            done = f"{row['done']}/{row['total']}" if row.get("total") is not None else ""
            table.add_row(name, row["status"], str(row["runs"]), done)
        return table

    def __rich__(self) -> RenderableType:
        parts: list[RenderableType] = [self.table()]
        now = self.clock()
        for tracked in self.approvals.items.values():
            if tracked.approval.status == ap.PENDING:
                parts.extend(pending_lines(tracked, self.db, now))
            else:
                parts.append(
                    Text(
                        f"approval {tracked.approval.approval_id} "
                        f"({tracked.approval.step}): {tracked.outcome}"
                    )
                )
        return Group(*parts)

    def __call__(self, event: ev.Event) -> None:
        self.approvals.see(event)
        if not event.step:
            return
        row = self.rows.setdefault(event.step, {"status": "", "runs": 0, "done": 0, "total": None})
        if event.event_type == ev.STEP_ENTER:
            row.update(
                status="RUNNING",
                runs=row["runs"] + 1,
                done=0,
                total=len(event.payload["items"]) if "items" in event.payload else None,
            )
        elif event.event_type == ev.APPROVAL_REQUESTED:
            row["status"] = ap.AWAITING_APPROVAL
        elif event.event_type == ev.APPROVAL_GRANTED:
            row["status"] = "RUNNING"
        elif event.event_type == ev.COMMAND_COMPLETED:
            row["done"] += 1
        elif event.event_type == ev.STEP_EXIT:
            row["status"] = event.status or ""
        elif event.event_type == ev.COMMAND_ISSUED and event.payload.get("teardown") is not None:
            if event.payload.get("attempt") == 1:  # a teardown step starts: it enters nothing
                row.update(status="RUNNING", runs=row["runs"] + 1)
        elif event.event_type in (ev.TEARDOWN_COMPLETED, ev.TEARDOWN_FAILED):
            row["status"] = event.status or ""


class ApprovalLines:
    """Off a terminal: each approval request, vote and outcome printed once, as lines."""

    def __init__(
        self, console: Console, db: str | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.console = console
        self.approvals = Approvals()
        self.db = db
        self.clock = clock

    def __call__(self, event: ev.Event) -> None:
        for tracked in self.approvals.see(event):
            for line in self.lines(event, tracked):
                self.console.print(line, highlight=False, soft_wrap=True)

    def lines(self, event: ev.Event, tracked: Tracked) -> list[Text]:
        a = tracked.approval
        if event.event_type == ev.APPROVAL_REQUESTED:
            return pending_lines(tracked, self.db, self.clock())
        if event.event_type == ev.APPROVAL_DECIDED:
            vote = a.votes[-1]
            reason = f": {vote.reason}" if vote.reason else ""
            return [
                Text(
                    f"approval {a.approval_id}: {vote.identity} {_PAST[vote.decision]}"
                    f"{reason} ({len(a.approvals)}/{a.quorum} approvals)"
                )
            ]
        return [Text(f"approval {a.approval_id} ({a.step}): {tracked.outcome}")]
