"""The diagnosis of a run on the engine service (`milepost doctor`, `GET
/api/executions/{id}/diagnosis`): the verdict is the core's (`core.diagnosis`), given the
fold and what the store knows beside it: the command table (who holds each command, until
when), the pools with a live worker (the workers registry, `engine.workers`), the run's
driver lease (`engine.drivers`), when it last moved (the stall window's clock,
`engine.liveness.progress`) and its running children.

The server reads through `Lifecycle.diagnosis` (under the run's lock, with its cached
state); the CLI on a local database through `local`, which folds the log itself: both
answer the same shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from milepost.core import diagnosis as dg
from milepost.core import state as st
from milepost.engine import drivers, liveness, summaries, workers
from milepost.engine.orchestrator import Orchestrator
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
    the workload stays sealed, the verdict needs none of it."""
    orchestrator = Orchestrator(store, machine_id=0)
    state = orchestrator.state(execution_id, workload=False)
    return report(store, state, orchestrator.playbook_for(state), now)


def report(
    store: port.Store, state: st.ExecutionState, playbook: model.Playbook, now: float
) -> dict[str, Any]:
    """`{execution_id, playbook, status, checked_at, findings: [{kind, step, message,
    fields}]}`, the most likely cause first."""
    facts = dg.Facts(now) if state.terminal else gather(store, state, playbook, now)
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
) -> dg.Facts:
    """What the store knows of a live run beside its fold."""
    rows = store.open_commands(state.execution_id)
    commands = {
        row.command_id: dg.OpenCommand(
            row.command_id, row.status, row.worker_id, row.lease_expires_at, row.pool
        )
        for row in rows
    }
    lease = store.get_driver(state.execution_id)
    driver = (
        None
        if lease is None
        else dg.Driver(lease.holder, lease.expires_at, drivers.holder_alive(lease.holder))
    )
    moved = None
    if playbook.executor.stall_after is not None:  # only a stall window reads the clock
        last_at = store.last_event_at(state.execution_id)
        if last_at is not None:  # what moved it, as the stall check reads it
            moved = liveness.progress(store, state.execution_id, now, last_at, rows)
    return dg.Facts(
        now,
        commands,
        frozenset(workers.live_pools(store, now)),
        driver,
        moved,
        _children(store, state, playbook),
    )


def _children(
    store: port.Store, state: st.ExecutionState, playbook: model.Playbook
) -> tuple[dg.Child, ...]:
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
            dg.Child(xid, str(payload.get("path") or ""), None if command is None else int(command))
        )
    return tuple(found)
