"""`ExecutionLocks`: one lock per execution, taken in id order, forgotten when free."""

from __future__ import annotations

import threading
import time

from milepost.engine.locks import ExecutionLocks

DEADLINE = 10.0


def _wait_for(event: threading.Event) -> bool:
    return event.wait(DEADLINE)


def test_different_executions_do_not_wait_for_each_other() -> None:
    locks = ExecutionLocks()
    inside, release = threading.Event(), threading.Event()

    def hold_one() -> None:
        with locks.hold([1]):
            inside.set()
            release.wait(DEADLINE)

    holder = threading.Thread(target=hold_one)
    holder.start()
    assert _wait_for(inside)
    entered = threading.Event()

    def other() -> None:
        with locks.hold([2]):
            entered.set()

    t = threading.Thread(target=other)
    t.start()
    assert _wait_for(entered), "execution 2 waited for execution 1's lock"
    release.set()
    holder.join(DEADLINE)
    t.join(DEADLINE)
    assert len(locks) == 0, "free locks are forgotten"


def test_the_same_execution_is_excluded_and_reentrant() -> None:
    locks = ExecutionLocks()
    inside, release = threading.Event(), threading.Event()
    order: list[str] = []

    def first() -> None:
        with locks.hold([7, 3]), locks.hold([3]):  # reentrant within one thread
            inside.set()
            release.wait(DEADLINE)
            order.append("first")

    def second() -> None:
        with locks.hold([3]):
            order.append("second")

    a = threading.Thread(target=first)
    a.start()
    assert _wait_for(inside)
    b = threading.Thread(target=second)
    b.start()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline and not order:  # give `second` a chance to cut in
        time.sleep(0.01)
    assert order == [], "a second holder of execution 3 got in"
    release.set()
    a.join(DEADLINE)
    b.join(DEADLINE)
    assert order == ["first", "second"]
    assert len(locks) == 0


def test_many_threads_over_overlapping_executions_finish() -> None:
    locks = ExecutionLocks()
    counts = {x: 0 for x in range(5)}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for n in range(200):
                xids = {(i + n) % 5, (i * 3 + n) % 5}
                with locks.hold(xids):
                    for x in xids:
                        value = counts[x]
                        counts[x] = value + 1  # a lost update shows if two got in at once
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert not errors
    expected = {x: 0 for x in range(5)}
    for i in range(8):
        for n in range(200):
            for x in {(i + n) % 5, (i * 3 + n) % 5}:
                expected[x] += 1
    assert counts == expected
    assert len(locks) == 0
