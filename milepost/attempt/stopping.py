"""An attempt a cancel of its run can stop: `stop()` cancels the task running it, and
takes that cancel back once the attempt has ended. Every tool cleans up on cancellation
(python: its worker process is killed; http: the request is aborted; shell: the process
group is killed), so stopping the task stops the tool. The attempt then ends as failed
with kind `cancelled`, which the worker reports like any outcome (the engine settles the
command at once instead of waiting for `cancel_grace`)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from milepost.core.cancellation import STOPPED
from milepost.core.work import AttemptResult


class Stoppable:
    def __init__(self) -> None:
        self.stopped = False
        self._task: asyncio.Task[Any] | None = None
        """The task running the attempt, while it runs it."""
        self._cancelled = 0
        """Cancels `stop()` sent that task (0 or 1): any more are its caller's."""

    async def run(self, attempt: Coroutine[Any, Any, AttemptResult]) -> AttemptResult:
        """Run `attempt`; its outcome, or the `cancelled` one when `stop()` came first. A
        cancel of the caller (a shutdown) is not a stop: it goes through."""
        if self.stopped:  # stopped before it began: the tool never starts
            attempt.close()
            return stopped()
        # the attempt runs in the caller's task, which `stop()` cancels: a task of its own
        # per attempt cost a task and a turn of the loop per step
        current = asyncio.current_task()
        assert current is not None, "an attempt runs in a task"
        self._task = current
        try:
            outcome = await attempt
        except asyncio.CancelledError:
            if not self._take_back(current):
                raise
            return stopped()
        finally:
            self._task = None
        if not self._take_back(current):
            # the caller was cancelled while the attempt swallowed the cancel passed on to
            # it: the caller's own cancel must not be lost with it
            raise asyncio.CancelledError
        return outcome

    def _take_back(self, task: asyncio.Task[Any]) -> bool:
        """Withdraw the cancel `stop()` sent; False when the caller's own cancel remains."""
        for _ in range(self._cancelled):
            task.uncancel()
        self._cancelled = 0
        return task.cancelling() == 0

    def stop(self) -> bool:
        """Stop the attempt (now if it runs, at its start if not yet); True the first time."""
        if self.stopped:
            return False
        self.stopped = True
        if self._task is not None:
            self._task.cancel()
            self._cancelled += 1
        return True


def stopped() -> AttemptResult:
    return AttemptResult(ok=False, error=dict(STOPPED))
