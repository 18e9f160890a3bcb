"""A throwaway local cluster: `milepost server` on a fresh PostgreSQL database plus workers.

Used by `milepost conformance --cluster` (and tests) to run the suite the way a
distributed installation runs it: separate processes that share only the database and
HTTP. Everything it creates (database, processes) is removed when it exits.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import httpx

from milepost.credentials import new_key
from milepost.errors import MilepostError

MILEPOST = str(Path(sys.executable).with_name("milepost"))


class ClusterError(MilepostError):
    """The local cluster could not start."""

    code = "cluster_error"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(
    url: str, timeout: float, exited: Callable[[], str | None], note: str = ""
) -> None:
    """Poll `url`'s /health until it answers 200. ClusterError with what `exited()` says
    once it names the server gone, or after `timeout` seconds (`note` appended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (gone := exited()) is not None:
            raise ClusterError(gone)
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise ClusterError(f"milepost server did not answer on {url} within {timeout:g}s{note}")


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, parts.fragment))


class LocalCluster:
    """`with LocalCluster(pg_url) as c:` -> `c.url`, `c.token` (admin); `workers` worker
    processes, each with a `worker` token as an installation gives them (`c.worker_token`)."""

    def __init__(
        self,
        pg_url: str,
        *,
        workers: int = 2,
        startup_timeout: float = 60.0,
        nats_url: str = "nats://127.0.0.1:4222",
        concurrency: int = 8,
    ) -> None:
        self.admin_url = _with_database(pg_url, "postgres")
        self.database = f"milepost_cluster_{os.getpid()}_{secrets.token_hex(3)}"
        self.db_url = _with_database(pg_url, self.database)
        self.workers = workers
        self.concurrency = concurrency
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = ""
        self.worker_token = ""
        self.env = dict(os.environ, MILEPOST_SECRET_KEY=new_key(), MILEPOST_DATABASE_URL="")
        # NATS wakes workers the moment commands are issued; polling remains the fallback
        self.env.setdefault("MILEPOST_NATS_URL", nats_url)
        self.env.pop("MILEPOST_DATABASE_URLS", None)
        # every process leases its machine id, as in production: one fixed id for all of
        # them would mint colliding event ids
        self.env.pop("MILEPOST_MACHINE_ID", None)
        self.processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> LocalCluster:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)

    def _start(self) -> None:
        self._admin(f'CREATE DATABASE "{self.database}"')
        self.token = self._new_token("admin", "conformance")  # the first one migrates
        self.worker_token = self._new_token("worker", "conformance-worker")
        self.env["MILEPOST_TOKEN"] = self.token
        self._spawn(
            [
                MILEPOST,
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--db",
                self.db_url,
            ]
        )
        self._wait_healthy()
        workers = dict(self.env, MILEPOST_TOKEN=self.worker_token)
        for _ in range(self.workers):
            self._spawn(
                [MILEPOST, "worker", "--server", self.url, "--concurrency", str(self.concurrency)],
                workers,
            )

    def _new_token(self, role: str, name: str) -> str:
        made = subprocess.run(
            [MILEPOST, "token", "create", "--role", role, "--name", name, "--db", self.db_url],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if made.returncode != 0:
            raise ClusterError(f"milepost token create failed: {made.stderr.strip()}")
        return made.stdout.strip().splitlines()[-1].strip()

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.processes.append(
            subprocess.Popen(
                argv, env=env or self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )

    def _wait_healthy(self) -> None:
        server = self.processes[0]
        wait_healthy(
            self.url,
            self.startup_timeout,
            lambda: (
                None
                if server.poll() is None
                else f"milepost server exited with {server.returncode}"
            ),
        )

    def close(self) -> None:
        for proc in reversed(self.processes):  # workers first, then the server
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.processes.clear()
        # best effort: never mask the error that brought us here
        with contextlib.suppress(Exception):
            self._admin(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
