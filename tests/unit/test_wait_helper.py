"""The one wait helper of the tests (`tests/shared.py`)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.shared import wait_for, wait_for_async


def test_wait_for_returns_the_first_truthy_value() -> None:
    counter = itertools.count()
    assert wait_for(lambda: next(counter) >= 3 and "ready") == "ready"


def test_wait_for_fails_naming_what_it_waited_for_and_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"waiting for the moon \(last: \[\]\)"):
        wait_for(lambda: [], "the moon", timeout=0.05)


def test_wait_for_names_the_condition_by_its_source_when_not_told() -> None:
    with pytest.raises(AssertionError, match=r"waiting for .*1 \+ 1 == 3"):
        wait_for(lambda: 1 + 1 == 3, timeout=0.05)


def test_an_error_of_the_condition_fails_at_once() -> None:
    def dead() -> bool:
        raise RuntimeError("the server died")

    with pytest.raises(RuntimeError, match="the server died"):
        wait_for(dead, timeout=60)


def test_wait_for_async_lets_other_tasks_run_and_takes_a_turn_between_checks() -> None:
    async def go() -> tuple[int, list[str]]:
        seen: list[str] = []
        task = asyncio.create_task(asyncio.sleep(0, "done"))
        task.add_done_callback(lambda t: seen.append(t.result()))
        await wait_for_async(lambda: seen)
        turns = itertools.count(1)

        async def turn() -> None:
            next(turns)

        await wait_for_async(lambda: next(turns) >= 5, between=turn)
        return next(turns), seen

    turns, seen = asyncio.run(go())
    assert seen == ["done"] and turns >= 6


def test_wait_for_async_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match="waiting for a report"):
        asyncio.run(wait_for_async(lambda: None, "a report", timeout=0.05))
