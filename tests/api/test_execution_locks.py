"""`ExecutionLocks`: one lock per execution, taken in id order, forgotten when free."""

from __future__ import annotations

import sys
import threading
import types
from typing import Any

import pytest

from milepost.engine.locks import ExecutionLocks
from milepost.store.locks import LockTable
from tests.shared import wait_for

DEADLINE = 10.0


class WatchedRLock:
    """An RLock that tells when a thread finds it held by another and starts to wait:
    the positive signal that a second holder is shut out (not merely late)."""

    blocked = threading.Event()

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        type(self).blocked.set()
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The module that makes the locks of `ExecutionLocks` makes WatchedRLocks (wherever
    that module lives)."""
    module = sys.modules[LockTable.__module__]
    fake: Any = types.SimpleNamespace(**{**vars(threading), "RLock": WatchedRLock})
    monkeypatch.setattr(module, "threading", fake)
    WatchedRLock.blocked = threading.Event()
    return WatchedRLock.blocked


def test_different_executions_do_not_wait_for_each_other() -> None:
    locks = ExecutionLocks()
    inside, release = threading.Event(), threading.Event()

    def hold_one() -> None:
        with locks.hold([1]):
            inside.set()
            release.wait(DEADLINE)

    holder = threading.Thread(target=hold_one)
    holder.start()
    wait_for(inside.is_set, "the holder of execution 1 inside its lock")
    entered = threading.Event()

    def other() -> None:
        with locks.hold([2]):
            entered.set()

    t = threading.Thread(target=other)
    t.start()
    wait_for(entered.is_set, "execution 2 to get in while execution 1 is held")
    release.set()
    holder.join(DEADLINE)
    t.join(DEADLINE)
    assert len(locks) == 0, "free locks are forgotten"


def test_the_same_execution_is_excluded_and_reentrant(watched: threading.Event) -> None:
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
    wait_for(inside.is_set, "the first holder of execution 3 inside its lock")
    assert not watched.is_set(), "the reentrant hold of one thread waited for itself"
    b = threading.Thread(target=second)
    b.start()
    wait_for(watched.is_set, "the second holder of execution 3 to wait for the lock")
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


def test_on_free_runs_when_a_thread_lets_go_of_its_last_lock_only() -> None:
    """The children nobody waits for are cancelled then (`Lifecycle._cancel_orphans`),
    holding no lock: a child's id may be lower than its parent's, and locks go in id
    order."""
    locks = ExecutionLocks()
    freed: list[bool] = []
    locks.on_free = lambda: freed.append(locks.held())
    with locks.hold([5]):
        with locks.hold([7]):
            assert locks.held()
        assert freed == []  # still holding 5
    assert freed == [False] and not locks.held()
    other: list[bool] = []
    thread = threading.Thread(target=lambda: other.append(locks.held()))
    with locks.hold([5]):
        thread.start()
        thread.join(DEADLINE)
    assert other == [False], "held is per thread"
    freed.clear()
    with pytest.raises(RuntimeError), locks.hold([5]):
        raise RuntimeError("boom")
    assert freed == [False], "also after a failure: what was committed before it"
