"""In-process reentrant locks by key: the orchestrator's lock on an execution where the
database has no lock of its own to offer (SQLite, memory)."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Hashable, Iterator


class LockTable:
    """One RLock per key while anyone holds or waits for it: the table keeps them weakly,
    so a lock nobody uses any more goes with its last holder (no reference counts)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locks: weakref.WeakValueDictionary[Hashable, threading.RLock] = (
            weakref.WeakValueDictionary()
        )

    def _lock(self, key: Hashable) -> threading.RLock:
        """The key's lock (the caller's reference keeps it alive while it holds it)."""
        with self._mutex:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.RLock()
            return lock

    @contextlib.contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        with self._lock(key):
            yield

    @contextlib.contextmanager
    def try_hold(self, key: Hashable) -> Iterator[bool]:
        """`hold` if the lock is free now (or this thread's): yields whether it was taken."""
        lock = self._lock(key)
        taken = lock.acquire(blocking=False)
        try:
            yield taken
        finally:
            if taken:
                lock.release()

    def __len__(self) -> int:
        return len(self._locks)


EXECUTION_LOCKS = LockTable()
"""Shared by every store of this process: the key names the database and the execution."""
