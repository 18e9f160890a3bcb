"""Children nobody waits for (DSL 3.5): a child run lives for the `playbook` attempt that
waits on it, so the engine cancels it once nothing does, whatever the transport:

- its parent ended, however it ended (a failed step, a stall, a timeout, a budget, an
  engine error, a cancel, an operator's skip or retry that let it complete): every RUNNING
  child of a run that ended;
- the parent's command that started it was settled, by whatever settled it (the engine's
  timeout, a lost lease, a stall, a cancel's abandonment, an operator's action, or its own
  report when its tool was stopped or gave up): the RUNNING children whose
  `execution.started` names that command (`parent_command_id`). A command its tool
  reported after the child ended leaves nothing to cancel;
- a child whose start was on its way while either happened is cancelled as soon as it
  starts (`unwaited`).

Only steps that may start children are looked at (`starts_children`): a report of another
step costs nothing here. The cancel itself is `Lifecycle.cancel`, so a child gets what a
cancel gives (its attempts stopped, abandoned after its `cancel_grace`, its compensations,
its own children cancelled in turn); the caller runs it outside every execution lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from milepost.core import cancellation
from milepost.core import events as ev
from milepost.core import state as st
from milepost.playbook import model
from milepost.store import port

if TYPE_CHECKING:
    from milepost.engine.orchestrator import Orchestrator, Outcome

Orphan = tuple[int, str | None, str]
"""A child to cancel: its id, the actor of its cancel (its parent's canceller, if any) and
the cause (`core.cancellation.child_cause`)."""

SETTLING = frozenset({ev.COMMAND_COMPLETED, ev.COMMAND_FAILED, ev.COMMAND_LEASE_EXPIRED})
"""The events after which no attempt of a command runs any more (a stale one is the late
report of an attempt that ran on: its child may still run)."""


def starts_children(playbook: model.Playbook, step: str) -> bool:
    """Whether an attempt of `step` may start a child: a `playbook` task, or a workbook
    task whose entry is one (or is not known before rendering)."""
    spec = playbook.steps.get(step)
    if spec is None:
        return False
    for task in spec.tasks:
        if task.kind == "playbook":
            return True
        if task.kind == "workbook":
            entry = playbook.workbook.get(str(task.config.get("name")))
            if entry is None or entry.task.kind == "playbook":
                return True
    return False


def orphaned(store: port.Store, orchestrator: Orchestrator, outcome: Outcome) -> list[Orphan]:
    """The running children an outcome left with nobody waiting for them."""
    found: list[Orphan] = []
    ended = set()
    for state in outcome.finished:
        ended.add(state.execution_id)
        cancelled = state.status == st.CANCELLED
        why = "cancelled" if cancelled else state.status.lower()
        actor = state.cancel_actor if cancelled else None
        cause = cancellation.child_cause(state.execution_id, why)
        found.extend((child, actor, cause) for child in _running(store, state.execution_id))
    settled: dict[int, dict[int, str]] = {}
    for event in outcome.events:
        xid = event.execution_id
        if event.event_type not in SETTLING or xid in ended or event.step is None:
            continue
        cached = orchestrator.cached(xid)
        if cached is not None and starts_children(orchestrator.playbook_for(cached), event.step):
            settled.setdefault(xid, {})[int(event.payload["command_id"])] = event.step
    for xid, commands in settled.items():
        for child in _running(store, xid):
            step = commands.get(_started_by(store, child) or 0)
            if step is not None:
                cause = cancellation.child_cause(xid, f"step '{step}' stopped waiting")
                found.append((child, None, cause))
    return found


def unwaited(store: port.Store, parent_id: int, command_id: int | None) -> str | None:
    """Why nobody waits for a child that has just started (`child_cause`'s `why`), or None
    while its parent runs and the command that started it is still live."""
    parent = store.get_execution(parent_id)
    if parent is None:
        return None
    if parent.cancel_requested or parent.status == st.CANCELLED:
        return "cancelled"
    if parent.status in st.TERMINAL:
        return parent.status.lower()
    row = None if command_id is None else store.get_command(command_id)
    if row is not None and row.status not in (port.COMMAND_QUEUED, port.COMMAND_CLAIMED):
        return f"step '{row.step}' stopped waiting"
    return None


def _running(store: port.Store, xid: int) -> list[int]:
    """The running children not already asked to stop (a cancel walks theirs itself)."""
    children = []
    for child in store.running_children(xid):
        row = store.get_execution(child)
        if row is not None and not row.cancel_requested:
            children.append(child)
    return children


def _started_by(store: port.Store, child: int) -> int | None:
    """The command that started a child (its `execution.started` names it)."""
    started = store.load(child, before_seq=2)
    command = started[0].payload.get("parent_command_id") if started else None
    return None if command is None else int(command)
