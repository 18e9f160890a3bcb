"""Liveness and stalls (DSL 10.2, 10.6): what a step's lease is, and when a run that makes
no progress is failed, with what it waited for.

Pure: the time, the last progress and who holds each command come in as arguments. The
store keeps a command's own lease (`lease_s`) and a run's `stall_after` from the events
these fields go into, only when the playbook sets them: other runs' events stay as they
were.

What moves a run (`last_progress`): an event of its log, a live attempt, a running child
that moves. A heartbeat writes no event (heartbeats stay cheap: they only extend the
lease in the command table), so an attempt is read from its lease: a claimed attempt
moves its run until its lease lapses, whatever it takes. Reading the time of its last
heartbeat instead would tie `stall_after` to how often workers heartbeat (a third of a
lease the engine does not even know, the worker asks for it): a stall window shorter than
that would fail a step that is only slow. A worker that dies stops extending its lease;
the lease's end is then an event (`command.lease_expired`), and a step's own
`spec.liveness` says how soon that is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from milepost.core import approval_state as ap
from milepost.core import cancellation
from milepost.core import events as ev
from milepost.core import state as st
from milepost.playbook import durations, model
from milepost.settings import Settings

STALLED = "stalled"
"""The error kind of a run failed for making no progress for `executor.spec.stall_after`."""


REPORT_MARGIN_S: float = Settings.model_fields["lease_seconds"].default
"""What a step with a `spec.timeout` and no `spec.liveness` gets on top of its timeout."""


def lease_fields(playbook: model.Playbook, step: str) -> dict[str, Any]:
    """The `command.issued` fields of a step's lease: `{lease_s}` when the step (or
    `executor.spec`) sets `liveness`; for a step with only a `timeout`, the timeout plus
    the engine's default lease (DSL 10.2: the default liveness is never below the
    timeout, so an attempt inside its timeout is never declared lost, and one that hit
    it still has a lease's time to report); else nothing (the claim uses the engine's
    lease)."""
    spec = playbook.steps.get(step)
    if spec is None:
        return {}
    if spec.spec.liveness is not None:
        return {"lease_s": spec.spec.liveness}
    timeout = spec.spec.timeout
    return {} if timeout is None else {"lease_s": timeout + REPORT_MARGIN_S}


def started_fields(playbook: model.Playbook) -> dict[str, Any]:
    """The `execution.started` fields of a run's stall window, when the playbook sets one."""
    stall = playbook.executor.stall_after
    return {} if stall is None else {"stall_after": stall}


def last_progress(
    now: float,
    last_event_at: float,
    lease_ends: Iterable[float | None] = (),
    children: Iterable[float] = (),
) -> float:
    """When a run last moved: its last event; each claimed attempt's lease end, up to
    `now` (a live attempt moves it now); the last progress of each running child
    (recursively: a child's progress is its parent's)."""
    moved = [last_event_at, *children]
    moved.extend(min(now, end) for end in lease_ends if end is not None)
    return max(moved)


def stall_verdict(
    state: st.ExecutionState,
    playbook: model.Playbook,
    now: float,
    last_progress_at: float,
    holders: Mapping[int, str | None],
) -> dict[str, Any] | None:
    """The error that fails a run that has not moved since `last_progress_at`
    (`last_progress`) for longer than its `stall_after`, naming what it waited for; None
    while it is within its window (or has none, or has ended). `holders`: command id ->
    the worker holding its claim (None: queued), as the command projection says."""
    stall = playbook.executor.stall_after
    # a run being cancelled ends CANCELLED (its attempts abandoned after cancel_grace), not
    # FAILED: the people who cancelled it asked for that end
    if stall is None or state.terminal or state.cancel_requested:
        return None
    waiting = _waiting(state, holders)
    # a run waiting for people (an approval has its own `expires_in`) or for its own retry
    # timer is idle as designed: its window counts from the last timer's due time
    if waiting["approvals"]:
        return None
    since = max([last_progress_at, *(r["at"] for r in waiting["retries"])])
    if now - since <= stall:
        return None
    message = (
        f"no progress for {now - since:.0f}s (executor.spec.stall_after "
        f"{durations.text(stall)}): waiting for {_describe(waiting)}"
    )
    return {
        "step": None,
        "task": None,
        "kind": STALLED,
        "message": message,
        "reason": f"run stalled: {message}",
        "waiting": waiting,
    }


def stalled(
    event_id: int, execution_id: int, error: dict[str, Any], now: float, cause: int | None
) -> ev.Event:
    """The `execution.stalled` of a run `stall_verdict` failed with `error`; `cause`: the
    last event before the silence, as for any execution event."""
    return ev.new_event(
        event_id,
        execution_id,
        ev.EXECUTION_STALLED,
        now,
        payload={"error": error, "reason": error["reason"]},
        meta={"source": "reconciler"},
        parent_event_id=cause,
    )


def failed_event(
    execution_id: int,
    command_id: int,
    step: str,
    where: tuple[int, int, int],
    epoch: int,
    worker_id: str | None,
    error: dict[str, Any],
    event_id: int,
    now: float,
) -> ev.Event:
    """The engine's `command.failed` of an open command of a stalled run, or of an attempt
    past the engine's `default_timeout` (`where`: its run, index and attempt; `worker_id`:
    who holds its claim at `epoch`, None when queued), as the reconciler writes it."""
    return cancellation.failed_event(
        execution_id,
        command_id,
        step,
        where,
        epoch,
        error,
        event_id,
        now,
        worker_id=worker_id,
        source="reconciler",
    )


def lease_expired(
    execution_id: int,
    command_id: int,
    step: str,
    where: tuple[int, int, int],
    epoch: int,
    worker_id: str | None,
    lease_expires_at: float | None,
    event_id: int,
    now: float,
) -> ev.Event:
    """The `command.lease_expired` of a claim (held by `worker_id` at `epoch`) whose lease
    ended at `lease_expires_at` without a report: the worker is taken as lost. Caused by
    the command it ends, as a report is."""
    run, index, attempt = where
    message = f"worker {worker_id!r} lost: its lease (epoch {epoch}) expired without a report"
    payload = {
        "command_id": command_id,
        "run": run,
        "index": index,
        "attempt": attempt,
        "epoch": epoch,
        "worker_id": worker_id,
        "lease_expires_at": lease_expires_at,
        "message": message,
    }
    return ev.new_event(
        event_id,
        execution_id,
        ev.COMMAND_LEASE_EXPIRED,
        now,
        step=step,
        payload=payload,
        meta={"epoch": epoch, "source": "reconciler"},
        parent_event_id=command_id,
    )


def _waiting(state: st.ExecutionState, holders: Mapping[int, str | None]) -> dict[str, Any]:
    commands = []
    for cid, cmd in sorted(state.commands.items()):
        worker = holders.get(cid)
        commands.append(
            {
                "command_id": str(cid),
                "step": cmd.step,
                "index": cmd.index,
                "attempt": cmd.attempt,
                "status": "claimed" if worker else "queued",
                "worker_id": worker,
            }
        )
    approvals = [
        {"approval_id": str(a.approval_id), "step": a.step, "run": a.run}
        for a in state.approvals.values()
        if a.status == ap.PENDING
    ]
    retries = [
        {"step": sr.step, "index": i, "at": at}
        for sr in state.running.values()
        for i, at in sorted(sr.retry_at.items())
    ]
    # a compensation's or a teardown step's retry timer is as much the run's own as a step's
    retries += [
        {"step": item.target, "index": st.NO_INDEX, "at": item.retry_at}
        for phase in (state.compensation, state.teardown)
        for item in (phase.items if phase is not None else ())
        if item.retry_at is not None and item.command_id is None
    ]
    return {
        "steps": sorted(state.running),
        "commands": commands,
        "approvals": approvals,
        "retries": retries,
        "pending": sorted(state.pending),
    }


def _describe(waiting: dict[str, Any]) -> str:
    parts = []
    for c in waiting["commands"]:
        where = c["step"] + ("" if c["index"] == st.NO_INDEX else f"[{c['index']}]")
        held = f"claimed by {c['worker_id']}" if c["worker_id"] else "queued, no worker took it"
        parts.append(f"step '{where}' attempt {c['attempt']} ({held})")
    parts.extend(f"approval of step '{a['step']}'" for a in waiting["approvals"])
    parts.extend(f"retry of step '{r['step']}'" for r in waiting["retries"])
    busy = {c["step"] for c in waiting["commands"]} | {a["step"] for a in waiting["approvals"]}
    parts.extend(
        f"step '{s}' (running, nothing in flight)" for s in waiting["steps"] if s not in busy
    )
    parts.extend(f"step '{s}' (pending)" for s in waiting["pending"])
    return ", ".join(parts) or "nothing (no step running)"
