"""The python tool (DSL 3.1): user code runs in a pool of warm worker processes.

Workers are `spawn`ed lazily (never forked: the parent has threads), reused across calls
and replaced when they die or overrun their timeout (the worker is killed). One call owns a
worker at a time; the parent waits for the reply with `loop.add_reader` on the worker's
pipe, so no thread is involved per call. The pool is thread-safe and may serve several
event loops; a free worker is handed to waiters in FIFO order.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import dataclasses
import logging
import multiprocessing
import multiprocessing.util  # noqa: F401 - its exit hook must be registered before ours
import os
import pickle
import threading
import weakref
from asyncio import selector_events
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

from milepost.core import logs
from milepost.tools import base, python_worker

log = logging.getLogger(__name__)
output_log = logging.getLogger("milepost.tools.python.output")

_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[_Worker | None]"]


class WorkerDied(Exception):
    """The python worker process died."""


class PoolClosed(Exception):
    """The python worker pool is closed."""


class _Worker:
    __slots__ = ("process", "conn", "pid", "calls", "blocking")

    def __init__(self, process: Any, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.pid: int = process.pid
        self.calls = 0
        self.blocking = True
        """Whether its pipe is known to be blocking (a pipe is made so; a non-selector
        loop may change that while watching it: `_exchange`)."""

    def alive(self) -> bool:
        return bool(self.process.is_alive())

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.process.kill()
        self._reap(timeout=5.0)

    def stop(self) -> None:
        """Close the pipe: the child exits on EOF (`join` then reaps or kills it)."""
        with contextlib.suppress(OSError):
            self.conn.close()

    def join(self, timeout: float) -> None:
        self.process.join(timeout)
        if self.process.exitcode is None:
            self.kill()
        else:
            self._reap(timeout=0)

    def _reap(self, timeout: float) -> None:
        with contextlib.suppress(Exception):
            self.process.join(timeout)
        with contextlib.suppress(OSError):
            self.conn.close()
        with contextlib.suppress(ValueError):
            self.process.close()


class PythonPool:
    """A pool of warm python worker processes.

    Args:
        size: the most worker processes alive at once (each runs one call at a time).
        start_method: `spawn` (default) or `forkserver`; `fork` is refused.
        startup_timeout: seconds a new worker may take to report ready.
    """

    def __init__(
        self, size: int = 2, *, start_method: str = "spawn", startup_timeout: float = 60.0
    ) -> None:
        if size < 1:
            raise ValueError("python pool size must be at least 1")
        if start_method == "fork":
            raise ValueError("the python pool cannot fork: the parent process has threads")
        self.size = size
        self._ctx: Any = multiprocessing.get_context(start_method)
        self._startup_timeout = startup_timeout
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._workers: set[_Worker] = set()
        self._slots = 0  # workers alive or starting
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._closed = False
        _POOLS.add(self)

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers."""
        with self._lock:
            return sorted(w.pid for w in self._workers)

    async def start(self, count: int | None = None) -> None:
        """Start workers ahead of the first calls (`count`, default the pool size)."""
        wanted = min(count or self.size, self.size)
        results = await asyncio.gather(
            *(self._acquire() for _ in range(wanted)), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        for result in results:
            if isinstance(result, _Worker):
                self._release(result)
        if errors:
            raise errors[0]

    async def run(self, call: base.ToolCall) -> base.ToolResult:
        """Run the call's code; failures come back as a ToolResult, never raised."""
        code = _source(call.config)
        if code is None:
            return base.failure("invalid", "python tool needs `code` (a string)")
        libs = call.config.get("libs")
        if libs is not None and not isinstance(libs, Mapping | list):
            return base.failure("invalid", "python `libs` must map aliases to module names")
        try:
            payload = pickle.dumps(
                (code, dict(call.input), call.context, call.idempotency_key, libs, call.log_cap),
                protocol=python_worker.PROTOCOL,
            )
        except Exception as exc:  # noqa: BLE001 - whatever pickling raises
            return base.failure("invalid", f"python tool inputs cannot be sent: {exc}")
        try:
            worker = await self._acquire()
        except PoolClosed as exc:
            return base.failure("exception", str(exc), code="PoolClosed")
        except Exception as exc:  # noqa: BLE001 - a worker that cannot start
            return base.failure("exception", f"python worker could not start: {exc}")
        return await self._call(worker, payload, call)

    async def _call(self, worker: _Worker, payload: bytes, call: base.ToolCall) -> base.ToolResult:
        try:
            reply = await _exchange(worker, payload, call.timeout)
        except TimeoutError:
            self._discard(worker)
            return base.failure(
                "timeout",
                f"python code exceeded timeout of {call.timeout:g}s",
                code="Timeout",
                retryable=True,
            )
        except WorkerDied:
            self._discard(worker)
            return base.failure("exception", "python worker process died", code="WorkerDied")
        except BaseException:  # cancelled mid-call: the worker's state is unknown
            self._discard(worker)
            raise
        worker.calls += 1
        self._release(worker)
        return _decode(reply, call)

    def close(self) -> None:
        """Stop every worker (busy ones are killed); the pool cannot be used afterwards."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = self._workers.difference(idle)
            self._workers.clear()
            waiters = list(self._waiters)
            self._waiters.clear()
        for worker in idle:
            worker.stop()
        for worker in busy:
            worker.kill()
        for worker in idle:
            worker.join(timeout=2.0)
        for waiter in waiters:
            _hand_over(waiter, None, self)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # -- slots and workers -------------------------------------------------------------

    async def _acquire(self) -> _Worker:
        loop = asyncio.get_running_loop()
        while True:
            waiter: _Waiter | None = None
            with self._lock:
                if self._closed:
                    raise PoolClosed(PoolClosed.__doc__)
                worker = self._idle.pop() if self._idle else None
                if worker is None and self._slots < self.size:
                    self._slots += 1
                elif worker is None:
                    waiter = (loop, loop.create_future())
                    self._waiters.append(waiter)
            if worker is not None:
                if worker.alive():
                    return worker
                self._discard(worker)  # died while idle: replace it quietly
                continue
            if waiter is not None:
                worker = await self._wait(waiter)
                if worker is not None:
                    return worker
            return await self._start_in_slot()

    async def _wait(self, waiter: _Waiter) -> _Worker | None:
        """A handed-over worker, or None for a handed-over slot."""
        fut = waiter[1]
        try:
            return await fut
        except asyncio.CancelledError:
            with self._lock, contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            if fut.done() and not fut.cancelled():
                self._give_back(fut.result())
            raise

    async def _start_in_slot(self) -> _Worker:
        try:
            with self._lock:
                if self._closed:
                    raise PoolClosed(PoolClosed.__doc__)
            worker = await self._spawn()
        except BaseException:
            self._release_slot()
            raise
        with self._lock:
            closed = self._closed
            if not closed:
                self._workers.add(worker)
        if closed:
            worker.kill()
            raise PoolClosed(PoolClosed.__doc__)
        return worker

    async def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=python_worker.main, args=(child,), name="milepost-python", daemon=False
        )
        try:
            process.start()
        finally:
            child.close()
        worker = _Worker(process, parent)
        try:
            greeting = await _exchange(worker, None, self._startup_timeout)
        except BaseException:
            worker.kill()
            raise
        if greeting != python_worker.READY:
            worker.kill()
            raise WorkerDied(f"unexpected greeting {greeting[:40]!r}")
        log.debug(
            "python worker started", extra={"action": "python_worker_started", "pid": worker.pid}
        )
        return worker

    def _release(self, worker: _Worker) -> None:
        """Hand a healthy worker to the first waiter, or park it."""
        with self._lock:
            if self._closed:
                waiter = None
            elif self._waiters:
                waiter = self._waiters.popleft()
            else:
                self._idle.append(worker)
                return
        if waiter is None:
            worker.kill()
        else:
            _hand_over(waiter, worker, self)

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._workers.discard(worker)
        self._release_slot()

    def _release_slot(self) -> None:
        """Free a worker slot, or pass it to the first waiter, which starts a worker in it."""
        with self._lock:
            if self._waiters and not self._closed:
                waiter = self._waiters.popleft()
            else:
                self._slots -= 1
                return
        _hand_over(waiter, None, self)

    def _give_back(self, item: _Worker | None) -> None:
        if item is None:
            self._release_slot()
        else:
            self._release(item)


def _hand_over(waiter: _Waiter, item: _Worker | None, pool: PythonPool) -> None:
    loop, fut = waiter

    def deliver() -> None:
        if fut.done():  # the waiter gave up in the meantime
            pool._give_back(item)
        else:
            fut.set_result(item)

    try:
        loop.call_soon_threadsafe(deliver)
    except RuntimeError:  # the waiter's loop is closed
        pool._give_back(item)


async def _exchange(worker: _Worker, payload: bytes | None, timeout: float | None) -> bytes:
    """Send `payload` (if any) and wait for one reply, without blocking the loop."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[bytes] = loop.create_future()
    conn = worker.conn
    fd = conn.fileno()
    # the loop only tells us when the reply is readable; sends and receives block. Some
    # loops (uvloop) leave a watched fd non-blocking: a large payload would then fail
    # half-sent with EAGAIN, a large reply half-read, so each use makes it blocking again.
    # A selector loop (the embedded engine's) leaves it as it is: four fcntl calls a step
    # for nothing
    keeps = isinstance(loop, selector_events.BaseSelectorEventLoop)
    watched = False

    def readable() -> None:
        nonlocal watched
        loop.remove_reader(fd)
        watched = False
        if fut.done():
            return
        try:
            if not keeps:
                os.set_blocking(fd, True)  # a reply larger than the socket buffer arrives in parts
            fut.set_result(conn.recv_bytes())
        except (EOFError, OSError) as exc:
            fut.set_exception(WorkerDied(str(exc) or type(exc).__name__))

    try:
        if not (keeps and worker.blocking):
            os.set_blocking(fd, True)
        if payload is not None:
            conn.send_bytes(payload)
    except OSError as exc:
        raise WorkerDied(str(exc)) from exc
    worker.blocking = keeps
    loop.add_reader(fd, readable)
    watched = True
    try:
        if timeout is None:
            return await fut
        async with asyncio.timeout(timeout):
            return await fut
    finally:
        if watched:
            loop.remove_reader(fd)


def _decode(reply: bytes, call: base.ToolCall) -> base.ToolResult:
    message = pickle.loads(reply)
    if message[0] == "ok":
        _, value, output, used = message
        return base.ToolResult(data=value, usage=used, logs=_logs(output, None, call))
    _, cls, text, output, trace, at, used = message
    line, code_line = at if at else (None, None)
    if code_line:  # it quotes the code: redacted like the traceback
        code_line = call.redact(code_line)
    failed = base.failure("exception", f"{cls}: {text}", code=cls, line=line, code_line=code_line)
    return dataclasses.replace(failed, usage=used, logs=_logs(output, trace, call))


def _logs(
    output: list[tuple[str, str, int]] | None, trace: str | None, call: base.ToolCall
) -> tuple[logs.Captured, ...]:
    """The streams the worker captured (and the traceback, its file named as the step),
    also logged as one record naming the execution and step (in the text too, for a plain
    formatter and grep), redacted like the attempt's events."""
    found = [logs.Captured(stream, text, cut) for stream, text, cut in output or ()]
    if trace:
        found.append(
            logs.Captured(
                logs.TRACEBACK,
                trace.replace(
                    f'File "{python_worker.FILENAME}"', f'File "<step {call.step or "-"}>"'
                ),
            )
        )
    if found and output_log.isEnabledFor(logging.INFO):
        text = "\n".join(f"[{c.stream}] {c.text.rstrip()}" for c in found)
        output_log.info(
            "python output%s: %s",
            call.where(),
            call.redact(text),
            extra=call.log_extra("python_output"),
        )
    return tuple(found)


def _source(config: Mapping[str, Any]) -> str | None:
    """`code`, or its alias `script: {source: {type: inline, code: ...}}`."""
    code = config.get("code")
    if code is None:
        script = config.get("script")
        source = script.get("source") if isinstance(script, Mapping) else None
        if isinstance(source, Mapping) and source.get("type", "inline") == "inline":
            code = source.get("code")
    return code if isinstance(code, str) else None


_POOLS: weakref.WeakSet[PythonPool] = weakref.WeakSet()


@atexit.register
def _close_pools() -> None:
    # Registered after multiprocessing's own exit hook, so it runs first: the workers
    # are not daemonic (user code may start processes) and must be stopped before
    # multiprocessing joins them.
    for pool in list(_POOLS):
        with contextlib.suppress(Exception):
            pool.close()
