"""An attempt a cancel of its run can stop: it runs in a task of its own, and `stop()`
cancels that task. Every tool cleans up on cancellation (python: its worker process is
killed; http: the request is aborted; shell: the process group is killed), so stopping
the task stops the tool. The attempt then ends as failed with kind `cancelled`, which
the worker reports like any outcome (the engine settles the command at once instead
of waiting for `cancel_grace`)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from milepost.core.cancellation import STOPPED
from milepost.core.work import AttemptResult


class Stoppable:
    def __init__(self) -> None:
        self.stopped = False
        self._task: asyncio.Task[AttemptResult] | None = None

    async def run(self, attempt: Coroutine[Any, Any, AttemptResult]) -> AttemptResult:
        """Run `attempt`; its outcome, or the `cancelled` one when `stop()` came first. A
        cancel of the caller (a shutdown) is not a stop: it goes through."""
        if self.stopped:  # stopped before it began: the tool never starts
            attempt.close()
            return stopped()
        self._task = asyncio.ensure_future(attempt)
        current = asyncio.current_task()
        try:
            outcome = await self._task
        except asyncio.CancelledError:
            if not self.stopped or (current is not None and current.cancelling()):
                raise
            return stopped()
        finally:
            self._task = None
        if current is not None and current.cancelling():
            # the caller was cancelled while the attempt swallowed the cancel passed on to
            # it: the caller's own cancel must not be lost with it
            raise asyncio.CancelledError
        return outcome

    def stop(self) -> bool:
        """Stop the attempt (now if it runs, at its start if not yet); True the first time."""
        if self.stopped:
            return False
        self.stopped = True
        if self._task is not None:
            self._task.cancel()
        return True


def stopped() -> AttemptResult:
    return AttemptResult(ok=False, error=dict(STOPPED))
