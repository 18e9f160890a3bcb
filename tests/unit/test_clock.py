"""The engine's one clock (`engine/clock.py`): timers by kind and periodic duties on an
injected time, stepped by the test; its asyncio driver on a real loop."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from milepost.engine.clock import WAKE, Clock


class Now:
    def __init__(self, at: float = 1000.0) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def test_timers_fire_by_kind_when_due_and_once() -> None:
    now = Now()
    clock = Clock(now)
    woken: list[int] = []
    fired: list[int] = []
    clock.on(WAKE, woken.append)
    clock.on("schedule", fired.append)  # a new kind is one registration
    clock.at(WAKE, 7, 1005.0)
    clock.at(WAKE, 7, 1005.0)  # the same timer twice is one
    clock.at(WAKE, 8, 1002.0)
    clock.at("schedule", 1, 1003.0)
    assert clock.next_due() == 1002.0
    assert clock.step(1001.0) == {}
    assert clock.step(1003.0) == {WAKE: [8], "schedule": [1]}
    assert clock.pending(WAKE) == [(1005.0, 7)]
    clock.step(1010.0)
    assert woken == [8, 7] and fired == [1]
    assert clock.pending(WAKE) == [] and clock.next_due() is None


def test_a_kind_without_a_handler_waits_for_whoever_takes_it() -> None:
    clock = Clock(Now())
    clock.at(WAKE, 3, 1001.0)
    clock.at(WAKE, 4, 1009.0)
    assert clock.step(1002.0) == {}
    assert clock.due(WAKE, 1002.0) == [3]  # the reconciler's tick takes its own
    assert clock.pending(WAKE) == [(1009.0, 4)]


def test_dropped_timers_never_fire() -> None:
    clock = Clock(Now())
    woken: list[int] = []
    clock.on(WAKE, woken.append)
    clock.at(WAKE, 1, 1001.0)
    clock.at(WAKE, 1, 1002.0)
    clock.at(WAKE, 2, 1003.0)
    clock.drop(WAKE, 1)
    clock.step(1010.0)
    assert woken == [2]


def test_duties_run_every_period_after_the_first_step() -> None:
    clock = Clock(Now())
    ran: list[float] = []
    clock.every("tick", 1.0, ran.append)
    clock.step(1000.0)  # starts the period: a duty waits before its first turn
    clock.step(1000.5)
    clock.step(1001.0)
    clock.step(1001.5)
    clock.step(1003.0)
    assert ran == [1001.0, 1003.0]
    clock.step(990.0)  # the clock was set back: not a period's wait more
    assert ran == [1001.0, 1003.0, 990.0]
    with pytest.raises(ValueError, match="positive"):
        clock.every("spin", 0.0, ran.append)


def test_what_a_handler_or_a_duty_raises_is_logged_and_the_rest_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock(Now())
    woken: list[int] = []

    def fire(key: int) -> None:
        if key == 1:
            raise RuntimeError("boom")
        woken.append(key)

    def duty(now: float) -> None:
        raise RuntimeError("duty boom")

    clock.on(WAKE, fire)
    clock.every("reconcile_tick", 1.0, duty)
    clock.at(WAKE, 1, 1001.0)
    clock.at(WAKE, 2, 1001.0)
    clock.step(1000.0)
    with caplog.at_level(logging.ERROR, logger="milepost.engine.clock"):
        clock.step(1001.0)
    assert woken == [2]
    actions = [getattr(r, "action", None) for r in caplog.records]
    assert actions == ["timer_failed", "reconcile_tick_failed"]


def test_the_driver_fires_a_timer_set_from_another_thread_at_its_time() -> None:
    async def scenario() -> tuple[float, float]:
        clock = Clock(time.time)
        fired = asyncio.Event()
        at: list[float] = []

        def wake(key: int) -> None:
            at.append(time.time())
            fired.set()

        clock.on(WAKE, wake)
        driver = asyncio.create_task(clock.run())
        await asyncio.sleep(0.05)  # the driver is asleep (nothing due)
        due = time.time() + 0.2
        threading.Thread(target=clock.at, args=(WAKE, 1, due)).start()
        try:
            await asyncio.wait_for(fired.wait(), 5.0)
        finally:
            driver.cancel()
        return due, at[0]

    due, fired_at = asyncio.run(scenario())
    assert due <= fired_at < due + 0.5  # at its time, not a second's poll later


def test_the_driver_steps_through_offload() -> None:
    async def scenario() -> list[str]:
        threads: list[str] = []
        clock = Clock(time.time)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()

        def duty(now: float) -> None:
            threads.append(threading.current_thread().name)
            loop.call_soon_threadsafe(done.set)

        clock.every("duty", 0.05, duty)
        driver = asyncio.create_task(clock.run(offload=asyncio.to_thread))
        try:
            await asyncio.wait_for(done.wait(), 5.0)
        finally:
            driver.cancel()
        return threads

    threads = asyncio.run(scenario())
    assert threads and threads[0] != threading.main_thread().name
