"""A claim's events: `command.claimed` when a worker takes a command, `command.released`
when it gives it back unstarted. The store writes them in the transaction that takes or
gives back the claim (`store.projection`, `core.events.CLAIM_EVENTS`): they record who
held the command at which epoch, so the command table can be rebuilt from the log, and
change no decision. Pure: ids, time, the command and the claim come in.
"""

from __future__ import annotations

from milepost.core import events as ev

_CLAIMED = ev.default_status(ev.COMMAND_CLAIMED)


def claimed(
    event_id: int,
    execution_id: int,
    command_id: int,
    step: str,
    where: tuple[int, int, int],
    worker_id: str,
    epoch: int,
    expires_at: float,
    now: float,
    seq: int = 0,
) -> ev.Event:
    """The `command.claimed` of a claim of the command (`where`: its run, index and
    attempt) by `worker_id` at `epoch`, its lease ending at `expires_at` (`seq`: numbered
    already, when the claim's query numbers it), caused by the command it claims."""
    run, index, attempt = where
    payload = {
        "command_id": command_id,
        "worker_id": worker_id,
        "epoch": epoch,
        "lease_expires_at": expires_at,
        "run": run,
        "index": index,
        "attempt": attempt,
    }
    # positional: one for every command a worker takes
    return ev.Event(
        event_id,
        execution_id,
        ev.COMMAND_CLAIMED,
        now,
        step,
        _CLAIMED,
        payload,
        {},
        command_id,
        worker_id,
        seq,
    )


def released(
    event_id: int,
    execution_id: int,
    command_id: int,
    step: str,
    where: tuple[int, int, int],
    worker_id: str,
    epoch: int,
    now: float,
) -> ev.Event:
    """The `command.released` of the claim `worker_id` held at `epoch` and gave back
    (`where`: the command's run, index and attempt as it was claimed)."""
    run, index, attempt = where
    return ev.new_event(
        event_id,
        execution_id,
        ev.COMMAND_RELEASED,
        now,
        step=step,
        worker_id=worker_id,
        parent_event_id=command_id,
        payload={
            "command_id": command_id,
            "worker_id": worker_id,
            "epoch": epoch,
            "run": run,
            "index": index,
            "attempt": attempt,
        },
    )
