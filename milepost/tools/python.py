"""The python tool (DSL 3.1): user code runs in a pool of warm worker processes.

The pool grows on demand up to `size` processes, the most calls its host runs at once (a
worker's concurrency, the embedded engine's workers), so a python call never waits on
another's while its host has a free slot. It keeps `warm` processes alive however long
they idle and stops the others once idle for `idle_seconds`. A call that finds no idle
process waits for whichever comes first: a process another call frees, or one started
for it in a thread (a start costs ~0.1 s of CPU, a trivial call well under 1 ms).
Processes are reused across calls and replaced when they die or overrun their timeout (the
process is killed). A process runs `python_worker`, started with `subprocess`, never
forked (the parent has threads) nor `multiprocessing`-spawned (that re-imports the
parent's `__main__`). One call owns a process at a time; the parent waits for the reply
with `loop.add_reader` on its pipe, so no thread is involved per call. The pool is
thread-safe and may serve several event loops; a free process is handed to waiters in
FIFO order.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import dataclasses
import json
import logging
import multiprocessing
import os
import pickle
import subprocess
import sys
import threading
import time
import weakref
from asyncio import selector_events
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

from milepost.core import logs
from milepost.tools import base, python_worker

log = logging.getLogger(__name__)
output_log = logging.getLogger("milepost.tools.python.output")

IDLE_SECONDS = 60.0
"""How long a process beyond the warm ones may idle before it is stopped (a start costs
~0.1 s of CPU: a steady load keeps its processes)."""

_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[_Worker]"]


class WorkerDied(Exception):
    """The python worker process died."""


class PoolClosed(Exception):
    """The python worker pool is closed."""


class _Worker:
    __slots__ = ("process", "conn", "pid", "calls", "blocking", "idle_since")

    def __init__(self, process: subprocess.Popen[bytes], conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.pid: int = process.pid
        self.calls = 0
        self.blocking = True
        """Whether its pipe is known to be blocking (a pipe is made so; a non-selector
        loop may change that while watching it: `_exchange`)."""
        self.idle_since = 0.0
        """When it was last parked idle (the pool's clock)."""

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        self._reap(timeout=5.0)

    def stop(self) -> None:
        """Close the pipe: the child exits on EOF (`join` then reaps or kills it)."""
        with contextlib.suppress(OSError):
            self.conn.close()

    def join(self, timeout: float) -> None:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        else:
            self._reap(timeout=0)

    def _reap(self, timeout: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout)
        with contextlib.suppress(OSError):
            self.conn.close()


class PythonPool:
    """A pool of warm python worker processes.

    Args:
        size: the most worker processes alive at once (each runs one call at a time): the
            most calls its host runs at once.
        warm: processes kept however long they idle (default `size`: none is stopped);
            `start()` starts them ahead of the first calls.
        idle_seconds: how long a process beyond the warm ones may idle before it stops.
        clock: the time idleness is measured in. Given, its caller also drives retirement
            (`retire_idle`): no thread of the pool's own reads a clock that someone else
            moves (it would retire what the caller is looking at). Default: the monotonic
            clock, and a thread that retires idle processes as they age.
        startup_timeout: seconds a new worker may take to report ready.
    """

    def __init__(
        self,
        size: int = 2,
        *,
        warm: int | None = None,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        if size < 1:
            raise ValueError("python pool size must be at least 1")
        if idle_seconds <= 0:
            raise ValueError("python idle_seconds must be positive")
        self.size = size
        self.warm = size if warm is None else max(0, min(warm, size))
        self.idle_seconds = idle_seconds
        self._clock = clock or time.monotonic
        self._retires_itself = clock is None
        self._startup_timeout = startup_timeout
        self._lock = threading.Lock()
        self._tick = threading.Condition(self._lock)
        """Wakes the retiring thread: a process parked idle beyond the warm ones, or close."""
        self._idle: list[_Worker] = []
        """Oldest idle first: calls take the newest, so the rest age out."""
        self._workers: set[_Worker] = set()
        self._starting = 0
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._retirer: threading.Thread | None = None
        self._closed = False
        _POOLS.add(self)

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers."""
        with self._lock:
            return sorted(w.pid for w in self._workers)

    def describe(self) -> str:
        """What it runs at once, for a start line."""
        return f"python: up to {self.size} processes, {self.warm} kept warm"

    async def start(self, count: int | None = None) -> None:
        """Start workers ahead of the first calls (`count`, default the warm ones)."""
        wanted = min(self.warm if count is None else count, self.size)
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

    def retire_idle(self) -> int:
        """Stop the processes beyond the warm ones idle for `idle_seconds` by the clock,
        the longest idle first; the number stopped (the retiring thread calls it)."""
        with self._lock:
            retired = self._expired()
        _stop_all(retired)
        return len(retired)

    def close(self) -> None:
        """Stop every worker (busy ones are killed); the pool cannot be used afterwards."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = self._workers.difference(idle)
            self._workers.clear()
            waiters = list(self._waiters)
            self._waiters.clear()
            self._tick.notify_all()
        for worker in busy:
            worker.kill()
        _stop_all(idle)
        for waiter in waiters:
            _fail(waiter, PoolClosed(PoolClosed.__doc__))

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # -- processes -------------------------------------------------------------------------

    async def _acquire(self) -> _Worker:
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._closed:
                    raise PoolClosed(PoolClosed.__doc__)
                worker = self._idle.pop() if self._idle else None
                if worker is None:
                    waiter: _Waiter = (loop, loop.create_future())
                    self._waiters.append(waiter)
                    starts = self._starts_wanted()
            if worker is None:
                self._launch(starts)
                return await self._wait(waiter)
            if worker.alive():
                return worker
            self._discard(worker)  # died while idle: replace it quietly

    def _starts_wanted(self) -> int:
        """(Under the lock) how many processes to start now: one per waiter none is
        starting for yet, within `size`; counted as starting."""
        room = self.size - len(self._workers) - self._starting
        wanted = max(0, min(len(self._waiters) - self._starting, room))
        self._starting += wanted
        return wanted

    def _launch(self, starts: int) -> None:
        for _ in range(starts):
            threading.Thread(
                target=self._start_one, name="milepost-python-start", daemon=True
            ).start()

    def _start_one(self) -> None:
        """Start a process (in a thread of its own) and hand it to the first waiter; a
        start that fails fails the first waiter's call, as it would have its own."""
        try:
            worker = _spawn(self._startup_timeout)
        except Exception as exc:  # noqa: BLE001 - a worker that cannot start
            with self._lock:
                self._starting -= 1
                waiter = self._waiters.popleft() if self._waiters else None
                starts = 0 if self._closed else self._starts_wanted()
            self._launch(starts)  # the next waiters try a start of their own
            if waiter is None:
                log.warning(
                    "python worker could not start: %s",
                    exc,
                    extra={"action": "python_worker_failed"},
                )
            else:
                _fail(waiter, exc)
            return
        with self._lock:
            self._starting -= 1
            closed = self._closed
            if not closed:
                self._workers.add(worker)
        if closed:
            worker.kill()
            return
        log.debug(
            "python worker started", extra={"action": "python_worker_started", "pid": worker.pid}
        )
        self._release(worker)

    async def _wait(self, waiter: _Waiter) -> _Worker:
        fut = waiter[1]
        try:
            return await fut
        except asyncio.CancelledError:
            with self._lock, contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._release(fut.result())
            raise

    def _release(self, worker: _Worker) -> None:
        """Hand a healthy worker to the first waiter, or park it."""
        with self._lock:
            if self._closed:
                waiter = None
            elif self._waiters:
                waiter = self._waiters.popleft()
            else:
                worker.idle_since = self._clock()
                self._idle.append(worker)
                if len(self._workers) > self.warm and self._retires_itself:
                    self._retiring()
                return
        if waiter is None:
            worker.kill()
        else:
            _hand_over(waiter, worker, self)

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._workers.discard(worker)
            starts = 0 if self._closed else self._starts_wanted()
        self._launch(starts)  # its waiters get a new one

    # -- retiring idle processes -----------------------------------------------------------

    def _retiring(self) -> None:
        """(Under the lock) wake the retiring thread, started the first time."""
        if self._retirer is None:
            self._retirer = threading.Thread(
                target=self._retire_forever, name="milepost-python-retire", daemon=True
            )
            self._retirer.start()
        self._tick.notify()

    def _retire_forever(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                retired = self._expired()
                if not retired:
                    self._tick.wait(self._next_expiry())
                    continue
            _stop_all(retired)

    def _expired(self) -> list[_Worker]:
        """(Under the lock) take the idle processes past their idle time out of the pool,
        the longest idle first, keeping the warm ones."""
        now = self._clock()
        spare = len(self._workers) - self.warm
        retired: list[_Worker] = []
        while spare > 0 and self._idle and now - self._idle[0].idle_since >= self.idle_seconds:
            worker = self._idle.pop(0)
            self._workers.discard(worker)
            retired.append(worker)
            spare -= 1
        return retired

    def _next_expiry(self) -> float | None:
        """(Under the lock) seconds until the next idle process may retire; None: none may."""
        if len(self._workers) <= self.warm or not self._idle:
            return None
        return max(0.0, self._idle[0].idle_since + self.idle_seconds - self._clock())


def _spawn(startup_timeout: float) -> _Worker:
    """Start a worker process and wait (blocking) for its greeting."""
    parent, child = multiprocessing.Pipe(duplex=True)
    try:
        fd = child.fileno()
        process = subprocess.Popen(
            [sys.executable, "-c", python_worker.BOOT, str(fd), json.dumps(sys.path)],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
        )
    except BaseException:
        parent.close()
        raise
    finally:
        child.close()
    worker = _Worker(process, parent)
    try:
        if not parent.poll(startup_timeout):
            raise TimeoutError(f"no greeting within {startup_timeout:g}s")
        greeting = parent.recv_bytes()
    except (EOFError, OSError) as exc:
        worker.kill()
        raise WorkerDied(f"exited before its greeting (code {process.poll()})") from exc
    except BaseException:
        worker.kill()
        raise
    if greeting != python_worker.READY:
        worker.kill()
        raise WorkerDied(f"unexpected greeting {greeting[:40]!r}")
    return worker


def _stop_all(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.stop()
    for worker in workers:
        worker.join(timeout=2.0)


def _hand_over(waiter: _Waiter, worker: _Worker, pool: PythonPool) -> None:
    loop, fut = waiter

    def deliver() -> None:
        if fut.done():  # the waiter gave up in the meantime
            pool._release(worker)
        else:
            fut.set_result(worker)

    try:
        loop.call_soon_threadsafe(deliver)
    except RuntimeError:  # the waiter's loop is closed
        pool._release(worker)


def _fail(waiter: _Waiter, exc: BaseException) -> None:
    loop, fut = waiter

    def deliver() -> None:
        if not fut.done():
            fut.set_exception(exc)

    with contextlib.suppress(RuntimeError):  # the waiter's loop is closed: nobody waits
        loop.call_soon_threadsafe(deliver)


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
    # a process that ends without closing its pools: idle workers would exit on EOF
    # anyway, busy ones only once their code ends
    for pool in list(_POOLS):
        with contextlib.suppress(Exception):
            pool.close()
