"""Per-execution locks: the engine's cached states are plain objects shared by threads.

Every call of the engine service that reads or changes an execution's state holds that
execution's lock, so calls for different executions run side by side, their database
waits included.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator

from milepost.engine.machine import LeasedIds
from milepost.store.locks import LockTable


class ExecutionLocks:
    """One reentrant lock per execution (a `store.locks.LockTable`: made on demand, gone
    when nobody holds or waits for it). `hold` takes several in id order, so two callers
    cannot deadlock (a thread that already holds some may take more only in that order
    too).

    `on_free` is called when a thread lets go of the last locks it held: work that takes
    other executions' locks in no particular order (cancelling a run's children) waits
    for it instead of risking a deadlock. It must not raise."""

    def __init__(self) -> None:
        self._table = LockTable()
        self._depth = threading.local()
        self.on_free: Callable[[], None] | None = None

    @contextlib.contextmanager
    def hold(self, execution_ids: Iterable[int]) -> Iterator[None]:
        depth = self._held_here()
        self._depth.n = depth + 1
        try:
            with contextlib.ExitStack() as held:
                for xid in sorted(set(execution_ids)):
                    held.enter_context(self._table.hold(xid))
                yield
        finally:
            self._depth.n = depth
            if depth == 0 and self.on_free is not None:
                self.on_free()  # also after a failure: what was committed before it

    def held(self) -> bool:
        """Whether this thread holds some execution's lock now."""
        return self._held_here() > 0

    def _held_here(self) -> int:
        return int(getattr(self._depth, "n", 0))

    def try_hold(self, execution_id: int) -> contextlib.AbstractContextManager[bool]:
        """One execution's lock if it is free now (yields whether it was taken): it never
        waits, so a caller that holds other executions' locks may take it out of order."""
        return self._table.try_hold(execution_id)

    def __len__(self) -> int:
        return len(self._table)


class NoLocks:
    """`ExecutionLocks` for an engine called from one thread only (the embedded engine's
    loop): nothing can interleave, so holding costs nothing."""

    _held = contextlib.nullcontext()

    def hold(self, execution_ids: Iterable[int]) -> contextlib.AbstractContextManager[None]:
        return self._held

    def try_hold(self, execution_id: int) -> contextlib.AbstractContextManager[bool]:
        return contextlib.nullcontext(True)

    def held(self) -> bool:
        """Never: with one thread, no order of taking locks can deadlock."""
        return False

    def __len__(self) -> int:
        return 0


def locked_ids(new_id: Callable[[], int]) -> Callable[[], int]:
    """An id generator safe to call from several threads at once."""
    if isinstance(new_id, LeasedIds):
        return new_id  # it holds its own lock (shared with its renewal): one is enough
    return _LockedIds(new_id)


class _LockedIds:
    """`new_id` under a lock; its blocks too (`ids.block_of`) when it makes them."""

    def __init__(self, new_id: Callable[[], int]) -> None:
        self._new_id = new_id
        self._lock = threading.Lock()
        if hasattr(new_id, "block"):
            self.block = self._block

    def __call__(self) -> int:
        with self._lock:
            return self._new_id()

    def _block(self, n: int) -> int:
        with self._lock:
            return int(self._new_id.block(n))  # type: ignore[attr-defined]
