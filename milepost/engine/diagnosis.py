"""The diagnosis of a run on the engine service (`milepost doctor`, `GET
/api/executions/{id}/diagnosis`): the verdict is the core's (`core.diagnosis`), given the
fold and what the store knows beside it: the command table (who holds each command, until
when), the pools with a live worker (the workers registry, `engine.workers`), the run's
driver lease (`engine.drivers`), when it last moved (the stall window's clock,
`engine.liveness.progress`) and its running children.

The server reads through `Lifecycle.diagnosis` (under the run's lock, with its cached
state); the CLI on a local database through `local`, which folds the log itself: both
answer the same shape. `waits` is what every other read (status, describe, the runs list,
the graph) says the run waits on, from the same facts (`core.waiting`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from milepost.core import diagnosis as dg
from milepost.core import state as st
from milepost.core import waiting
from milepost.engine import drivers, liveness, summaries, workers
from milepost.playbook import model
from milepost.store import port

if TYPE_CHECKING:
    from milepost.engine.lifecycle import Lifecycle


def of(service: Lifecycle, execution_id: int) -> dict[str, Any]:
    """The diagnosis of one run (ExecutionNotFound when there is none)."""
    service.execution(execution_id)
    return service.read(
        execution_id,
        lambda state, playbook: report(service.store, state, playbook, service.clock()),
    )


def local(store: port.Store, execution_id: int, now: float) -> dict[str, Any]:
    """The same read on a database no engine of this process drives (the CLI's `--db`):
    the workload stays sealed, the verdict needs none of it. A reader's engine of its own:
    its state is folded from the log as it is now, never a cached one."""
    from milepost.engine.factory import build_engine, given  # the factory builds on this

    orchestrator = build_engine(store, given(default_timeout=None)).orchestrator
    state = orchestrator.state(execution_id, workload=False)
    return report(store, state, orchestrator.playbook_for(state), now)


def report(
    store: port.Store, state: st.ExecutionState, playbook: model.Playbook, now: float
) -> dict[str, Any]:
    """`{execution_id, playbook, status, checked_at, findings: [{kind, step, message,
    fields}]}`, the most likely cause first."""
    facts = waiting.Facts(now) if state.terminal else gather(store, state, playbook, now)
    findings = []
    for finding in dg.diagnose(state, playbook, facts):
        shown = finding.as_dict()
        shown["fields"] = {
            k: summaries.iso(v) if k.endswith("_at") and v is not None else v
            for k, v in finding.fields.items()
        }
        findings.append(shown)
    return {
        "execution_id": str(state.execution_id),
        "playbook": state.path,
        "status": state.status,
        "checked_at": summaries.iso(now),
        "findings": findings,
    }


def gather(
    store: port.Store, state: st.ExecutionState, playbook: model.Playbook, now: float
) -> waiting.Facts:
    """What the store knows of a live run beside its fold."""
    rows = store.open_commands(state.execution_id)
    moved = None
    if playbook.executor.stall_after is not None:  # only a stall window reads the clock
        last_at = store.last_event_at(state.execution_id)
        if last_at is not None:  # what moved it, as the stall check reads it
            moved = liveness.progress(store, state.execution_id, now, last_at, rows)
    return dataclasses.replace(
        facts(store, state, now, rows),
        last_progress_at=moved,
        children=_children(store, state, playbook),
    )


def facts(
    store: port.Store,
    state: st.ExecutionState,
    now: float,
    rows: list[port.CommandRow] | None = None,
) -> waiting.Facts:
    """What `core.waiting` reads beside the fold: the command table's rows of the run (read
    here unless the caller has them), the pools a live worker serves, the run's driver
    lease."""
    if rows is None:
        rows = store.open_commands(state.execution_id)
    commands = {
        row.command_id: waiting.OpenCommand(
            row.command_id, row.status, row.worker_id, row.lease_expires_at, row.pool
        )
        for row in rows
    }
    lease = store.get_driver(state.execution_id)
    driver = (
        None
        if lease is None
        else waiting.Driver(lease.holder, lease.expires_at, drivers.holder_alive(lease.holder))
    )
    return waiting.Facts(now, commands, frozenset(workers.live_pools(store, now)), driver)


def waits(
    store: port.Store, state: st.ExecutionState, playbook: model.Playbook, now: float
) -> list[dict[str, Any]]:
    """What a run waits on (`core.waiting.waits`) as every read shows it: `due_at` as
    ISO-8601 UTC (the reader says how far off it is); empty for an ended run."""
    if state.terminal:
        return []
    found = waiting.waits(state, playbook, facts(store, state, now))
    return [{**w.as_dict(), "due_at": summaries.iso(w.due_at)} for w in found]


def _children(
    store: port.Store, state: st.ExecutionState, playbook: model.Playbook
) -> tuple[waiting.Child, ...]:
    """The running children, looked for only while a `playbook` step has a command out
    (`store.running_children`, indexed by parent)."""
    steps = {cmd.step for cmd in state.commands.values()}
    if not any(
        task.kind == "playbook"
        for step in steps
        if step in playbook.steps
        for task in playbook.steps[step].tasks
    ):
        return ()
    found = []
    for xid in store.running_children(state.execution_id):
        started = store.load(xid, before_seq=2)  # its execution.started names the command
        payload = started[0].payload if started else {}
        command = payload.get("parent_command_id")
        found.append(
            waiting.Child(
                xid, str(payload.get("path") or ""), None if command is None else int(command)
            )
        )
    return tuple(found)
