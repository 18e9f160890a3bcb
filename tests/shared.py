"""What every test shares: the one wait helper, where the shared test data lives, and a
count of the lines code runs (`LinesRun`, for tests of how work grows with size).

Waiting: `wait_for` (threads, processes) and `wait_for_async` (an event loop) poll a
condition until a deadline and fail naming what they waited for. No test sleeps a fixed
time for something to happen, nor for something NOT to happen: it waits for a positive
signal instead, so it can fail and never costs its timeout when all is well.

Shared data: `MILEPOST_SHARED`, else `shared/` beside the checkout. The data (NoETL conformance playbooks, the peer benchmark) is read in place, never
copied into the repo. Outside CI a missing folder skips the tests that need it; under
CI (`CI=true`) it is an error, so a broken checkout cannot pass by skipping.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import pytest

import milepost

T = TypeVar("T")

TIMEOUT = 10.0
"""Seconds a condition gets by default: generous, as two cores are shared by many tests."""
INTERVAL = 0.01

SHARED = Path(os.environ.get("MILEPOST_SHARED") or Path(__file__).resolve().parents[2] / "shared")
CONFORMANCE = SHARED / "conformance" / "noetl"
PLAYBOOKS = CONFORMANCE / "playbooks"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

if IN_CI and not PLAYBOOKS.is_dir():
    raise RuntimeError(f"CI needs the shared test data at {SHARED} (set MILEPOST_SHARED)")

needs_shared = pytest.mark.skipif(not PLAYBOOKS.is_dir(), reason=f"no shared data at {SHARED}")

NATS_URL = os.environ.get("MILEPOST_TEST_NATS_URL", "nats://127.0.0.1:4222")


def nats_reachable() -> bool:
    """A TCP probe of `NATS_URL`: nats-py retries a refused first connection forever."""
    host, _, port = NATS_URL.rsplit("/", 1)[-1].partition(":")
    try:
        with socket.create_connection((host, int(port or 4222)), timeout=2):
            return True
    except OSError:
        return False


def require_nats() -> str:
    """`NATS_URL` when it answers; else the test is skipped, or fails under CI (where the
    NATS tests must run)."""
    if not nats_reachable():
        if IN_CI:
            pytest.fail(f"CI needs NATS at {NATS_URL} (set MILEPOST_TEST_NATS_URL)")
        pytest.skip(f"no NATS at {NATS_URL}")
    return NATS_URL


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without its `MILEPOST_` settings (a user's shell, not the
    test run's), then `extra`."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("MILEPOST_")}, **extra}


def wait_for(
    check: Callable[[], T],
    what: str | None = None,
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
) -> T:
    """Poll `check` until it returns something truthy, and return that.

    Fails after `timeout` seconds with an AssertionError naming `what` (by default the
    source of `check`) and the last value seen. An exception of `check` propagates: a
    condition that can tell it will never hold (the process died) fails at once."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(check, what, timeout, value))
        time.sleep(interval)


async def wait_for_async(
    check: Callable[[], T | Awaitable[T]],
    what: str | None = None,
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    between: Callable[[], Awaitable[object]] | None = None,
) -> T:
    """`wait_for` on an event loop: the other tasks run while it waits; `check` may be
    a coroutine function (an HTTP call of an async client).

    `between` replaces the sleep between two checks (a fake clock's turn: let the loop
    run, then move time to the next sleeper); the deadline stays in real time."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(check, what, timeout, value))
        await (between() if between is not None else asyncio.sleep(interval))


def _timed_out(check: Callable[[], object], what: str | None, timeout: float, last: object) -> str:
    return f"timed out after {timeout:g}s waiting for {what or _source(check)} (last: {last!r})"


def _source(check: Callable[[], object]) -> str:
    """The condition as written (a lambda's line), for a message that names it."""
    try:
        return " ".join(inspect.getsource(check).split())
    except (OSError, TypeError):
        return repr(check)


def metric_sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of a Prometheus exposition (`/metrics`), by name and labels."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"{name} {labels} not in the exposition")


def process_gone(pid: int) -> bool:
    """Whether `pid` has died: no such process, or a zombie its parent has not reaped yet
    (a killed grandchild waits for init; `os.kill(pid, 0)` still finds it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


MILEPOST_CODE = str(Path(milepost.__file__).parent)
"""The package's own folder: `LinesRun(MILEPOST_CODE)` counts milepost's lines only."""


class LinesRun:
    """Counts the lines Python runs in the files under `prefix` while it is entered: a
    measure of work that no machine's speed moves, for tests of how work grows with size
    (`tests/unit/test_core_scaling.py`). Other tracers (a coverage run) are put back after."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.lines = 0
        self._before: Any = None

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if not frame.f_code.co_filename.startswith(self.prefix):
            return None
        self.lines += event == "line"
        return self._trace

    def __enter__(self) -> LinesRun:
        self._before = sys.gettrace()
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(self._before)
