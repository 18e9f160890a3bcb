"""`attempt.stopping.Stoppable`: a cancel of the run stops the attempt with a `cancelled`
outcome; a cancel of the caller (a shutdown) is never turned into one."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from milepost.attempt.stopping import Stoppable
from milepost.core.work import AttemptResult

CANCELLED = {
    "kind": "cancelled",
    "retryable": False,
    "message": "execution cancelled: the attempt was stopped",
}


async def _forever(started: asyncio.Event, cleaned: list[str]) -> AttemptResult:
    started.set()
    try:
        await asyncio.Event().wait()
    finally:
        cleaned.append("tool stopped")  # what a tool does on cancellation (kill, abort)
    return AttemptResult(ok=True)


def test_a_stop_while_it_runs_stops_the_tool_and_is_a_cancelled_outcome() -> None:
    async def go() -> tuple[AttemptResult, list[str]]:
        started, cleaned, stopper = asyncio.Event(), [], Stoppable()
        task = asyncio.create_task(stopper.run(_forever(started, cleaned)))
        await started.wait()
        assert stopper.stop() and not stopper.stop()  # True the first time only
        return await task, cleaned

    outcome, cleaned = asyncio.run(go())
    assert outcome == AttemptResult(ok=False, error=CANCELLED)
    assert cleaned == ["tool stopped"]


def test_a_stop_before_it_starts_never_starts_the_tool() -> None:
    async def go() -> tuple[AttemptResult, asyncio.Event]:
        started, stopper = asyncio.Event(), Stoppable()
        stopper.stop()
        return await stopper.run(_forever(started, [])), started

    outcome, started = asyncio.run(go())
    assert outcome.error == CANCELLED and not started.is_set()


def test_a_cancel_of_the_caller_goes_through_even_when_the_attempt_swallows_it() -> None:
    async def stubborn(started: asyncio.Event) -> AttemptResult:
        started.set()
        with contextlib.suppress(asyncio.CancelledError):  # a tool that will not be cancelled
            await asyncio.Event().wait()
        return AttemptResult(ok=True)

    async def go(work: str) -> None:
        started, stopper = asyncio.Event(), Stoppable()
        attempt = stubborn(started) if work == "stubborn" else _forever(started, [])
        task = asyncio.create_task(stopper.run(attempt))
        await started.wait()
        task.cancel()
        await task

    for work in ("stubborn", "polite"):
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(go(work))


def test_the_task_that_ran_a_stopped_attempt_goes_on() -> None:
    # the attempt runs in its caller's task: the stop's cancel must not outlive the attempt
    async def go() -> tuple[AttemptResult, AttemptResult, int]:
        started, stopper = asyncio.Event(), Stoppable()

        async def worker() -> tuple[AttemptResult, AttemptResult, int]:
            first = await stopper.run(_forever(started, []))
            await asyncio.sleep(0)  # a cancel left behind would raise here
            second = await Stoppable().run(_quick())
            current = asyncio.current_task()
            assert current is not None
            return first, second, current.cancelling()

        task = asyncio.create_task(worker())
        await started.wait()
        stopper.stop()
        return await task

    first, second, cancelling = asyncio.run(go())
    assert first.error == CANCELLED and second == AttemptResult(ok=True) and cancelling == 0


def test_a_stop_the_attempt_swallows_gives_its_outcome() -> None:
    async def go() -> AttemptResult:
        started, stopper = asyncio.Event(), Stoppable()

        async def stubborn() -> AttemptResult:
            started.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
            return AttemptResult(ok=True, result=1)

        task = asyncio.create_task(stopper.run(stubborn()))
        await started.wait()
        stopper.stop()
        return await task

    assert asyncio.run(go()) == AttemptResult(ok=True, result=1)


async def _quick() -> AttemptResult:
    return AttemptResult(ok=True)
