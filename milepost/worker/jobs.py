"""One claimed command in the worker, from its claim to its report, and how the worker
logs about it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from milepost.attempt.stopping import Stoppable
from milepost.worker.clock import Clock

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class Job:
    """One claimed command, from the claim to its report."""

    command: dict[str, Any]
    command_id: int
    execution_id: int
    epoch: int
    step: str
    phase: str = "claimed"
    """claimed (not started; released on shutdown) -> running -> reporting."""
    lost: bool = False
    """The lease was lost: abandon, never report."""
    refilled: bool = False
    """Its report claimed the next commands: the claim loop need not poll for its slot."""
    task: asyncio.Task[None] | None = None
    stopper: Stoppable = field(default_factory=Stoppable)
    """Stops its attempt when the run is cancelled (a `cancelled` outcome, reported)."""
    heartbeats: asyncio.Task[None] | None = None
    """The task that heartbeats its claim (`Worker._heartbeats`)."""
    sleeping: bool = False
    """That task waits for its next heartbeat (a `beat_now` wakes it)."""
    beats_asked: int = 0
    """Cancels `beat_now` sent the sleeping task to wake it (any more are a real cancel)."""
    beat_pending: bool = False
    """A heartbeat asked for while one was on its way: the next one goes at once."""

    def beat_now(self) -> None:
        """Heartbeat without waiting for the interval (a cancel was announced for its run).
        The sleeping task is woken by a cancel it takes back (`wait_beat`): a helper task
        and a wait on two futures a command cost more than its whole attempt's turns of
        the loop in a chain of steps."""
        task = self.heartbeats
        if self.sleeping and task is not None and not task.done():
            self.beats_asked += 1
            task.cancel()
        else:
            self.beat_pending = True

    async def wait_beat(self, clock: Clock, interval: float) -> None:
        """Until `interval` of `clock` has passed or `beat_now` was called."""
        if self.beat_pending:
            self.beat_pending = False
            return
        self.sleeping = True
        try:
            await clock.sleep(interval)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not self.beats_asked or task is None or task.cancelling() > self.beats_asked:
                raise  # the job is over (or shutting down): not a beat asked for
            for _ in range(self.beats_asked):
                task.uncancel()
            self.beats_asked = 0
        finally:
            self.sleeping = False


def cancel_announced(held: Iterable[Job], notice: Mapping[str, Any]) -> None:
    """A cancel of runs was announced (NATS, `engine.notify.CANCELS`): the attempts held of
    them heartbeat now, and stop if the heartbeat confirms it; the announcement alone stops
    nothing (anyone could publish it)."""
    ids = {str(x) for x in notice.get("execution_ids") or ()}
    for job in held:
        if str(job.execution_id) in ids:
            job.beat_now()


def lease_seconds(lease: Any, asked: float) -> float:
    """The length of a lease as the server gave it (`lease.lease_seconds`: the step's own
    `spec.liveness`), else the one the worker asked for."""
    given = lease.get("lease_seconds") if isinstance(lease, dict) else None
    return float(given) if isinstance(given, int | float) and given > 0 else asked


def heartbeat_every(lease: Any, asked: float) -> float:
    """A third of the lease the server gave, or of the one the worker asked for when that
    is shorter: a step's lease may be long (its timeout's), and the heartbeat is also how
    the worker learns of a cancel."""
    return min(lease_seconds(lease, asked), asked) / 3


def log_job(
    job: Job, level: int, action: str, message: str, *args: Any, exc_info: bool = False
) -> None:
    """Log about one command: its ids lead the message and go in `extra` (never values)."""
    if not log.isEnabledFor(level):
        return
    log.log(
        level,
        "command %s (step %r, execution %s): " + message,
        job.command_id,
        job.step,
        job.execution_id,
        *args,
        exc_info=exc_info,
        extra={
            "action": action,
            "command_id": str(job.command_id),
            "execution_id": str(job.execution_id),
            "step": job.step,
        },
    )
