"""Processes for the acceptance tests: a `milepost server` and `milepost.worker.main` workers.

Everything runs as subprocesses, as on real machines: the server on SQLite or on a fresh
PostgreSQL database (created and dropped here), workers in their own process groups so a
"kill -9" takes their python tool processes down with them, like a machine dying.
Conditions are awaited with deadlines (`tests.shared.wait_for`), never with fixed sleeps.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from milepost.client import MilepostClient
from tests.shared import IN_CI, NATS_URL, clean_env, nats_reachable, wait_for

T = TypeVar("T")

PYTHON = sys.executable
MILEPOST = str(Path(sys.executable).with_name("milepost"))
PG_ADMIN_URL = os.environ.get("MILEPOST_TEST_PG_URL", "postgresql://127.0.0.1:5432/postgres")
WORKER_ENTRY = "import sys; from milepost.worker.main import worker_main; sys.exit(worker_main())"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# -- databases -----------------------------------------------------------------------------


def _pg_connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=3)


def pg_available() -> bool:
    try:
        with _pg_connect(PG_ADMIN_URL):
            return True
    except Exception:  # noqa: BLE001
        return False


@contextlib.contextmanager
def database(kind: str, tmp: Path) -> Iterator[str]:
    """A fresh database URL: a SQLite file, or a PostgreSQL database dropped afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp / 'milepost.db'}"
        return
    if not pg_available():
        if IN_CI:
            pytest.fail(f"CI needs PostgreSQL at {PG_ADMIN_URL} (set MILEPOST_TEST_PG_URL)")
        pytest.skip(f"no PostgreSQL at {PG_ADMIN_URL}")
    name = f"milepost_acc_{uuid.uuid4().hex[:12]}"
    with _pg_connect(PG_ADMIN_URL) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with _pg_connect(PG_ADMIN_URL) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- processes -----------------------------------------------------------------------------


def answers(base: str) -> bool:
    """Whether the server at `base` answers `/health` (not yet, while it starts)."""
    try:
        return httpx.get(base + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


class Proc:
    """A subprocess in its own process group, its output in a log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self._out = log.open("ab")
        self.popen = subprocess.Popen(
            args,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int, group: bool = False) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(self.popen.pid, sig)
            else:
                os.kill(self.popen.pid, sig)

    def kill9(self) -> None:
        """SIGKILL the whole group (the worker and its python tool processes)."""
        self.signal(signal.SIGKILL, group=True)
        self.popen.wait(10)
        self._out.close()

    def stop(self, timeout: float = 15) -> int | None:
        if self.alive():
            self.signal(signal.SIGCONT, group=True)
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL, group=True)
                self.popen.wait(10)
        self.signal(signal.SIGKILL, group=True)  # python tool processes left behind
        self._out.close()
        return self.popen.returncode


def _token_of(output: str) -> str:
    found = re.findall(r"mp_[A-Za-z0-9_\-]+", output)
    return found[-1] if found else output.strip().splitlines()[-1].strip()


class Cluster:
    """One server and its workers on one database, plus an admin client."""

    def __init__(
        self, db_url: str, tmp: Path, *, lease_seconds: float = 30.0, use_nats: bool | None = None
    ) -> None:
        self.db_url = db_url
        self.tmp = tmp
        self.lease_seconds = lease_seconds
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.use_nats = nats_reachable() if use_nats is None else use_nats
        self.env = self._base_env()
        # the first token migrates the database; the key needs none: those two at once
        key = self._start_cli("secret-key")
        admin = self._start_cli(*self._token_args("admin"))
        self.env["MILEPOST_SECRET_KEY"] = self._finish_cli(key).strip().splitlines()[-1]
        self.admin_token = _token_of(self._finish_cli(admin))
        self.worker_token = self.token("worker")
        self.server: Proc | None = None
        self.others: list[Proc] = []
        """More servers on the same database (`start_other_server`)."""
        self.workers: list[Proc] = []
        self._server_runs = 0
        self.client = MilepostClient(self.url, self.admin_token, timeout=30)

    def _base_env(self) -> dict[str, str]:
        env = clean_env()
        env.update(
            {
                "MILEPOST_DATABASE_URL": self.db_url,
                "MILEPOST_LEASE_SECONDS": str(self.lease_seconds),
                # no MILEPOST_MACHINE_ID: the server leases its machine id, workers ask for theirs
                "MILEPOST_LOG_LEVEL": "INFO",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.use_nats:
            env["MILEPOST_NATS_URL"] = NATS_URL
        return env

    def _start_cli(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [MILEPOST, *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @staticmethod
    def _finish_cli(proc: subprocess.Popen[str]) -> str:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"{' '.join(map(str, proc.args))}: {err}"  # type: ignore[arg-type]
        return out

    def _token_args(self, role: str, user: str | None = None) -> list[str]:
        held = ["--user", user] if user else []
        return [
            "token",
            "create",
            "--role",
            role,
            "--name",
            f"acc-{user or role}",
            *held,
            "--db",
            self.db_url,
        ]

    def token(self, role: str, user: str | None = None) -> str:
        """A new token of `role` (held by `user`, who may then vote on approvals), from
        `milepost token create`."""
        return _token_of(self._finish_cli(self._start_cli(*self._token_args(role, user))))

    # -- server --------------------------------------------------------------------------

    def start_server(self) -> Proc:
        self._server_runs += 1
        log = self.tmp / f"server-{self._server_runs}.log"
        args = [
            MILEPOST,
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--db",
            self.db_url,
        ]
        self.server = Proc("server", args, self.env, log)
        wait_for(self._healthy, f"the server to answer /health (log: {tail(log)})", timeout=30)
        return self.server

    def _healthy(self) -> bool:
        assert self.server is not None
        if not self.server.alive():
            pytest.fail(f"the server exited: {tail(self.server.log)}")
        return answers(self.url)

    def start_other_server(self) -> str:
        """Another `milepost server` on the same database, on a port of its own; its URL."""
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = self.tmp / f"server-other-{len(self.others) + 1}.log"
        args = [MILEPOST, "server", "--host", "127.0.0.1", "--port", str(port), "--db", self.db_url]
        proc = Proc(f"server-other-{len(self.others) + 1}", args, self.env, log)
        self.others.append(proc)

        def healthy() -> bool:
            if not proc.alive():
                pytest.fail(f"the other server exited: {tail(log)}")
            return answers(url)

        wait_for(healthy, f"the other server to answer /health (log: {tail(log)})", timeout=30)
        return url

    def kill_server(self) -> None:
        assert self.server is not None
        self.server.kill9()

    # -- workers -------------------------------------------------------------------------

    def start_worker(
        self,
        *,
        concurrency: int = 4,
        python_workers: int = 2,
        grace_seconds: float = 10.0,
        pool: str | None = None,
        token: str | None = None,
        env: dict[str, str] | None = None,
        server_url: str | None = None,
    ) -> Proc:
        """A `milepost worker` process; `pool`: the pool it serves (`--pool`, else default);
        `token`: its MILEPOST_TOKEN (default a worker token); `env`: more settings;
        `server_url`: its MILEPOST_SERVER_URL (default the server's; several,
        comma-separated)."""
        index = len(self.workers) + 1
        settings = dict(self.env)
        settings.update(
            {
                "MILEPOST_SERVER_URL": server_url or self.url,
                "MILEPOST_TOKEN": self.worker_token if token is None else token,
                "MILEPOST_CONCURRENCY": str(concurrency),
                "MILEPOST_PYTHON_WORKERS": str(python_workers),
                "MILEPOST_GRACE_SECONDS": str(grace_seconds),
                "MILEPOST_WORKER_ID": f"worker-{index}",
                **(env or {}),
            }
        )
        if pool is not None:
            settings["MILEPOST_POOL"] = pool
        proc = Proc(
            f"worker-{index}",
            [PYTHON, "-c", WORKER_ENTRY],
            settings,
            self.tmp / f"worker-{index}.log",
        )
        self.workers.append(proc)
        return proc

    def workers_live(self, count: int = 1) -> None:
        """Wait until `count` workers have checked in: a run with a stall window shorter
        than a worker's start on a busy machine must not start before."""
        wait_for(
            lambda: len(self.client.workers(status="live")["items"]) >= count,
            f"{count} live worker(s)",
            timeout=30,
        )

    # -- runs ----------------------------------------------------------------------------

    def run(self, playbook: str, workload: dict[str, Any] | None = None) -> str:
        entry = self.client.register(playbook)
        return self.client.execute(entry["path"], workload, version=entry["version"])

    def wait(self, execution_id: str, timeout: float = 45) -> dict[str, Any]:
        try:
            return self.client.wait(execution_id, timeout=timeout)
        except Exception:
            print(self.diagnostics())
            raise

    def diagnostics(self) -> str:
        parts = []
        for proc in ([self.server] if self.server else []) + self.others + self.workers:
            parts.append(f"--- {proc.name} (alive={proc.alive()}) ---\n{tail(proc.log)}")
        return "\n".join(parts)

    @classmethod
    @contextlib.contextmanager
    def running(cls, db_url: str, tmp: Path, **kw: Any) -> Iterator[Cluster]:
        """A cluster with its server and one worker started, closed on the way out."""
        with cls(db_url, tmp, **kw) as made:
            made.start_server()
            made.start_worker()
            yield made

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        for proc in [*self.others, *([self.server] if self.server else [])]:
            proc.stop()
        self.client.close()


@contextlib.contextmanager
def milepost_ui(db: str, folder: Path, timeout: float = 60) -> Iterator[tuple[str, str, Proc]]:
    """`milepost ui` on the database `db` (its log in `folder`), once it has printed its
    session's token and answers: its URL, the token and the process, stopped on the way out."""
    port = free_port()
    log = folder / f"ui-{port}.log"
    proc = Proc("ui", [MILEPOST, "ui", "--db", db, "--port", str(port)], clean_env(), log)
    base = f"http://127.0.0.1:{port}"

    def printed() -> str:
        found = re.search(r"mp_[\w-]+", log.read_text())
        return found[0] if found else ""

    try:
        token = wait_for(printed, f"the token to be printed ({log})", timeout=timeout)
        wait_for(lambda: answers(base), f"`milepost ui` to answer ({log})", timeout=timeout)
        yield base, token, proc
    finally:
        proc.stop()
