"""Serving the mock API: in a background thread for tests (`MockServer`), or as the
command line ``python -m milepost.conformance.mock_api [PORT]`` (`main`)."""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from types import TracebackType

import fastapi
import httpx
import uvicorn

from milepost.conformance.mock_api.app import create_app

DEFAULT_PORT = 5555

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
