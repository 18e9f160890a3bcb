"""Mock HTTP API used by the NoETL conformance fixtures.

A small stateful JSON-over-HTTP service standing in for a paginated third-party API, written
from the behavioural specification in ``conformance/noetl/MOCK_API.md``. The conformance suite
points the fixtures' ``api_url`` at it (``${MOCK_API_URL}``).

Public API:

* :func:`create_app` returns a fresh FastAPI application with its own, fresh state.
* :class:`MockServer` runs an application with uvicorn in a background thread (for tests).
* :func:`main` is the command line: ``python -m milepost.conformance.mock_api [PORT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import math
import re
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Annotated, Any

import fastapi
import httpx
import uvicorn
from fastapi import Query
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

__all__ = ["DEFAULT_PORT", "MockServer", "MockState", "create_app", "main"]

DEFAULT_PORT = 5555
TOTAL_ITEMS = 35
DEFAULT_PAGE_SIZE = 10
DEFAULT_MAX_EVENTS = 200
ERROR_TIMEOUT_SECONDS = 30.0
MAX_PROBE_DELAY_SECONDS = 300.0

# --------------------------------------------------------------------------------------------
# Query parameter types
# --------------------------------------------------------------------------------------------

# Decimal digits with an optional sign, optionally followed by a fraction made only of zeros.
_INT_PATTERN = re.compile(r"[+-]?[0-9]+(?:\.0+)?", re.ASCII)
_INT_PARSING_MSG = "Input should be a valid integer, unable to parse string as an integer"


def _parse_query_int(value: Any) -> Any:
    """Parse an integer query value strictly (``1``, ``-3``, ``+2``, ``1.0``; not ``1.5``)."""
    if not isinstance(value, str):
        return value
    if _INT_PATTERN.fullmatch(value) is None:
        raise PydanticCustomError("int_parsing", _INT_PARSING_MSG)
    try:
        return int(value.partition(".")[0])
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        raise PydanticCustomError("int_parsing", _INT_PARSING_MSG) from None


QueryInt = Annotated[int, Query(), BeforeValidator(_parse_query_int)]
"""An integer query parameter validated as the specification describes."""

ProbeDelay = Annotated[float, Query(ge=0, le=MAX_PROBE_DELAY_SECONDS)]

# --------------------------------------------------------------------------------------------
# Datasets and pagination helpers
# --------------------------------------------------------------------------------------------


def _ids() -> range:
    return range(1, TOTAL_ITEMS + 1)


def _users() -> list[dict[str, Any]]:
    return [{"id": i, "username": f"user{i}", "email": f"user{i}@example.com"} for i in _ids()]


def _assessments() -> list[dict[str, Any]]:
    return [{"id": i, "name": f"Assessment {i}", "score": 50 + (i % 50)} for i in _ids()]


def _events() -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "type": "user_action",
            "timestamp": f"2024-01-{(i % 28) + 1:02d}T12:00:00Z",
            "data": {"action": f"event_{i}"},
        }
        for i in _ids()
    ]


def _plain_items() -> list[dict[str, Any]]:
    return [{"id": i, "value": f"item_{i}"} for i in _ids()]


def _rate_limited_items() -> list[dict[str, Any]]:
    return [{"id": i, "value": f"item_{i}", "rate_limited": True} for i in _ids()]


def _slice(items: list[dict[str, Any]], start: int, count: int) -> list[dict[str, Any]]:
    """Items at positions ``start .. start+count-1`` (Python slice semantics)."""
    return items[start : start + count]


def _simple_page(items: list[dict[str, Any]], page: int) -> dict[str, Any]:
    """The ``/flaky``-style page body: page ``page`` of size 10, no ``total`` field."""
    start = (page - 1) * DEFAULT_PAGE_SIZE
    return {
        "data": _slice(items, start, DEFAULT_PAGE_SIZE),
        "paging": {
            "hasMore": page * DEFAULT_PAGE_SIZE < TOTAL_ITEMS,
            "page": page,
            "pageSize": DEFAULT_PAGE_SIZE,
        },
    }


def encode_cursor(page: int) -> str:
    """Cursor for ``page``: padded standard base64 of the decimal page number."""
    return base64.b64encode(str(page).encode("ascii")).decode("ascii")


def decode_cursor(cursor: str | None) -> int:
    """Page number of ``cursor``; missing, empty or undecodable cursors mean page 1."""
    if not cursor:
        return 1
    try:
        return int(base64.b64decode(cursor).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return 1


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------


class MockState:
    """All mutable state of one application instance; every update holds one lock."""

    def __init__(
        self,
        *,
        max_events: int = DEFAULT_MAX_EVENTS,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._wall_clock = wall_clock
        self._flaky_attempts: dict[int, int] = {}
        self._rate_window: deque[float] = deque()
        self._started = 0
        self._completed = 0
        self._active = 0
        self._max_active = 0
        self._events: deque[dict[str, Any]] = deque(maxlen=max_events)

    # -- /flaky -------------------------------------------------------------------------------

    def flaky_attempt(self, page: int) -> int:
        """Count one more attempt at ``page``; returns the new count."""
        with self._lock:
            count = self._flaky_attempts.get(page, 0) + 1
            self._flaky_attempts[page] = count
            return count

    def flaky_attempts(self) -> dict[int, int]:
        with self._lock:
            return dict(self._flaky_attempts)

    def flaky_reset(self) -> None:
        with self._lock:
            self._flaky_attempts.clear()

    # -- /rate-limited ------------------------------------------------------------------------

    def rate_limit_admit(self, requests_per_second: int) -> tuple[bool, int, int]:
        """Apply the one-second sliding window.

        Returns ``(accepted, requests_in_window, retry_after)``; ``requests_in_window`` counts
        the window after adding an accepted request, ``retry_after`` only matters when the
        request is rejected.
        """
        with self._lock:
            now = self._clock()
            window = self._rate_window
            while window and now - window[0] > 1.0:
                window.popleft()
            if len(window) >= requests_per_second:
                oldest = window[0] if window else now
                retry_after = max(1, math.floor(1 - (now - oldest)) + 1)
                return False, len(window), retry_after
            window.append(now)
            return True, len(window), 0

    # -- concurrency probe --------------------------------------------------------------------

    def probe_start(self, label: str, delay_seconds: float) -> tuple[int, int]:
        """Register an arriving probe; returns ``(request_id, active_at_start)``."""
        with self._lock:
            self._started += 1
            request_id = self._started
            self._active += 1
            self._max_active = max(self._max_active, self._active)
            self._events.append(
                {
                    "phase": "start",
                    "request_id": request_id,
                    "label": label,
                    "delay_seconds": delay_seconds,
                    "ts": self._wall_clock(),
                    "active": self._active,
                }
            )
            return request_id, self._active

    def probe_end(self, request_id: int, label: str, duration_seconds: float) -> dict[str, int]:
        """Register a finished probe; returns the counters right after the update."""
        with self._lock:
            self._active = max(0, self._active - 1)
            self._completed += 1
            self._events.append(
                {
                    "phase": "end",
                    "request_id": request_id,
                    "label": label,
                    "duration_seconds": duration_seconds,
                    "ts": self._wall_clock(),
                    "active": self._active,
                }
            )
            return self._counters()

    def probe_abort(self) -> None:
        """A probe was cancelled mid-sleep (server shutdown): it is no longer active."""
        with self._lock:
            self._active = max(0, self._active - 1)

    def concurrency_stats(self) -> dict[str, Any]:
        with self._lock:
            return {**self._counters(), "recent_events": [dict(e) for e in self._events]}

    def concurrency_reset(self) -> None:
        with self._lock:
            self._started = self._completed = self._active = self._max_active = 0
            self._events.clear()

    def _counters(self) -> dict[str, int]:
        return {
            "started": self._started,
            "completed": self._completed,
            "active": self._active,
            "max_active": self._max_active,
        }


# --------------------------------------------------------------------------------------------
# Application
# --------------------------------------------------------------------------------------------


def _internal_server_error() -> PlainTextResponse:
    """What an unexpected server fault looks like (Starlette's default 500)."""
    return PlainTextResponse("Internal Server Error", status_code=500)


def create_app(
    *,
    max_events: int = DEFAULT_MAX_EVENTS,
    error_timeout_seconds: float = ERROR_TIMEOUT_SECONDS,
) -> fastapi.FastAPI:
    """Build a fresh mock API application with fresh state (``app.state.mock``).

    ``max_events`` bounds the concurrency probe's event log; ``error_timeout_seconds`` is how
    long ``/api/v1/errors?error_type=timeout`` waits (30 s per the specification).
    """
    state = MockState(max_events=max_events)
    # redirect_slashes=False: "/api/v1/users/" is an unknown path (404), not a redirect.
    app = fastapi.FastAPI(
        title="milepost conformance mock API", version="1.0", redirect_slashes=False
    )
    app.state.mock = state

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/api/v1/users")
    async def users(offset: QueryInt = 0, limit: QueryInt = DEFAULT_PAGE_SIZE) -> dict[str, Any]:
        return {
            "users": _slice(_users(), offset, limit),
            "has_more": offset + limit < TOTAL_ITEMS,
            "offset": offset,
            "limit": limit,
            "total": TOTAL_ITEMS,
        }

    @app.get("/api/v1/assessments")
    async def assessments(
        page: QueryInt = 1,
        pageSize: QueryInt = DEFAULT_PAGE_SIZE,  # the wire name is camelCase
    ) -> dict[str, Any]:
        start = (page - 1) * pageSize
        return {
            "data": _slice(_assessments(), start, pageSize),
            "paging": {
                "hasMore": start + pageSize < TOTAL_ITEMS,
                "page": page,
                "pageSize": pageSize,
                "total": TOTAL_ITEMS,
            },
        }

    @app.get("/api/v1/events")
    async def events(
        cursor: Annotated[str | None, Query()] = None,
        limit: QueryInt = DEFAULT_PAGE_SIZE,
    ) -> dict[str, Any]:
        page = decode_cursor(cursor)
        start = (page - 1) * limit
        end = start + limit
        return {
            "events": _slice(_events(), start, limit),
            "next_cursor": encode_cursor(page + 1) if end < TOTAL_ITEMS else None,
            "limit": limit,
        }

    @app.get("/api/v1/flaky", response_model=None)
    async def flaky(
        page: QueryInt = 1,
        fail_on: Annotated[str, Query()] = "",
    ) -> dict[str, Any] | fastapi.Response:
        fail_pages: set[int] = set()
        for entry in fail_on.split(","):
            if not entry.strip():
                continue
            try:
                fail_pages.add(int(entry))
            except ValueError:
                return _internal_server_error()
        attempts = state.flaky_attempt(page)
        if page in fail_pages and attempts == 1:
            return JSONResponse({"detail": "Simulated failure"}, status_code=500)
        return _simple_page(_plain_items(), page)

    @app.post("/api/v1/flaky/reset")
    async def flaky_reset() -> dict[str, str]:
        state.flaky_reset()
        return {"status": "reset", "message": "Flaky endpoint counters cleared"}

    @app.get("/api/v1/errors", response_model=None)
    async def errors(
        page: QueryInt = 1,
        error_type: Annotated[str | None, Query()] = None,
        retry_after: QueryInt = 5,
    ) -> dict[str, Any] | fastapi.Response:
        if error_type == "429":
            return JSONResponse(
                {"error": "Too Many Requests", "message": "Rate limit exceeded"},
                status_code=429,
                headers={"Retry-After": str(retry_after)},
            )
        if error_type == "500":
            return JSONResponse({"detail": "Internal Server Error - simulated"}, status_code=500)
        if error_type == "503":
            return JSONResponse(
                {"error": "Service Unavailable", "message": "Server temporarily unavailable"},
                status_code=503,
                headers={"Retry-After": str(retry_after)},
            )
        if error_type == "timeout":
            await asyncio.sleep(error_timeout_seconds)
            return {"data": [], "simulated": "timeout"}
        if error_type == "auth":
            return JSONResponse({"detail": "Unauthorized - invalid credentials"}, status_code=401)
        if error_type == "403":
            return JSONResponse({"detail": "Forbidden - insufficient permissions"}, status_code=403)
        if error_type == "404":
            return JSONResponse({"detail": "Not Found - resource does not exist"}, status_code=404)
        return _simple_page(_plain_items(), page)

    @app.get("/api/v1/rate-limited", response_model=None)
    async def rate_limited(
        page: QueryInt = 1,
        requests_per_second: QueryInt = 2,
    ) -> dict[str, Any] | fastapi.Response:
        accepted, in_window, retry_after = state.rate_limit_admit(requests_per_second)
        if not accepted:
            return JSONResponse(
                {
                    "error": "Rate limit exceeded",
                    "requests_in_window": in_window,
                    "limit": requests_per_second,
                },
                status_code=429,
                headers={"Retry-After": str(retry_after)},
            )
        body = _simple_page(_rate_limited_items(), page)
        body["rate_limit"] = {"requests_in_window": in_window, "limit": requests_per_second}
        return body

    @app.get("/api/v1/concurrency/probe")
    async def concurrency_probe(
        delay_seconds: ProbeDelay = 0.0,
        label: Annotated[str, Query()] = "probe",
    ) -> dict[str, Any]:
        request_id, active_at_start = state.probe_start(label, delay_seconds)
        began = time.perf_counter()
        try:
            # the loop's timers may fire a little early (uvloop rounds to the millisecond):
            # the probe promises at least the delay, measured on the clock it reports
            while (left := delay_seconds - (time.perf_counter() - began)) > 0:
                await asyncio.sleep(left)
        except BaseException:
            state.probe_abort()
            raise
        duration = round(time.perf_counter() - began, 4)
        counters = state.probe_end(request_id, label, duration)
        return {
            "request_id": request_id,
            "label": label,
            "delay_seconds": delay_seconds,
            "duration_seconds": duration,
            "active_at_start": active_at_start,
            **counters,
        }

    @app.get("/api/v1/concurrency/stats")
    async def concurrency_stats() -> dict[str, Any]:
        return state.concurrency_stats()

    @app.post("/api/v1/concurrency/reset")
    async def concurrency_reset() -> dict[str, str]:
        state.concurrency_reset()
        return {"status": "reset"}

    return app


# --------------------------------------------------------------------------------------------
# Background server
# --------------------------------------------------------------------------------------------

_WILDCARD_HOSTS = {"", "0.0.0.0", "::"}


class MockServer:
    """Serve a mock API application with uvicorn in a background thread.

    ``port=0`` binds a free port. The socket is bound and listening before the server thread
    starts, so :meth:`start` simply waits (with a deadline) for ``/health`` to answer.
    Usable as a context manager.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        app: fastapi.FastAPI | None = None,
        startup_timeout: float = 10.0,
        shutdown_timeout: float = 5.0,
    ) -> None:
        self.host = host
        self.port = port
        self.app = app if app is not None else create_app()
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self._url: str | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """``http://<host>:<port>`` of the running server, no trailing slash."""
        if self._url is None:
            raise RuntimeError("MockServer is not running; call start() first")
        return self._url

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> MockServer:
        if self._thread is not None:
            raise RuntimeError("MockServer already started")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted connections of
        # sockets whose proto is IPPROTO_TCP; without it every keep-alive request pays ~40 ms
        # of Nagle/delayed-ACK latency.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            if sys.platform != "win32":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self.port = sock.getsockname()[1]
        client_host = self.host
        if client_host in _WILDCARD_HOSTS:
            client_host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
        if ":" in client_host:
            client_host = f"[{client_host}]"
        self._url = f"http://{client_host}:{self.port}"

        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            # typed int | None upstream, but it only feeds asyncio.wait_for: floats work
            timeout_graceful_shutdown=self.shutdown_timeout,  # type: ignore[arg-type]
        )
        self._server = uvicorn.Server(config)
        self._error = None
        self._thread = threading.Thread(target=self._run, name=f"mock-api-{self.port}", daemon=True)
        self._thread.start()
        try:
            self._wait_until_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _run(self) -> None:
        assert self._server is not None and self._sock is not None
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # reported by start(); never escapes the thread
            self._error = exc

    def _wait_until_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        health = f"{self.url}/health"
        with httpx.Client(trust_env=False) as client:
            while True:
                thread = self._thread
                if thread is None or not thread.is_alive():
                    raise RuntimeError(f"mock API server exited during startup: {self._error!r}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"mock API at {self.url} did not become healthy")
                try:
                    # The socket already listens, so this waits in the backlog until served.
                    response = client.get(health, timeout=min(0.5, remaining))
                except httpx.TransportError:
                    continue
                if response.status_code == 200:
                    return

    def stop(self) -> None:
        """Stop the server (in-flight requests get ``shutdown_timeout`` seconds) and join."""
        thread, server, sock = self._thread, self._server, self._sock
        if thread is None or server is None:
            return
        server.should_exit = True
        thread.join(self.shutdown_timeout + 5.0)
        if thread.is_alive():
            server.force_exit = True
            thread.join(5.0)
        if sock is not None:
            sock.close()
        self._thread = self._server = self._sock = None
        self._url = None
        if thread.is_alive():
            raise RuntimeError("mock API server thread did not stop")

    def __enter__(self) -> MockServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {port}")
    return port


def main(argv: list[str] | None = None) -> None:
    """``python -m milepost.conformance.mock_api [PORT]``: serve on 0.0.0.0 (default 5555)."""
    parser = argparse.ArgumentParser(
        prog="python -m milepost.conformance.mock_api",
        description="Mock HTTP API for the NoETL conformance fixtures.",
    )
    parser.add_argument("port", nargs="?", type=_port, default=DEFAULT_PORT, help="default 5555")
    parser.add_argument("--host", default="0.0.0.0", help="default 0.0.0.0")
    args = parser.parse_args(argv)
    print(f"mock API listening on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    uvicorn.run(create_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
