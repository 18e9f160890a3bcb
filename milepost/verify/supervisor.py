"""The installation under test: one `milepost server` and worker processes (the journal
worker, `journal.py`) on one database, each in its own process group so a SIGKILL or a
SIGSTOP takes its python tool processes with it, like a machine dying or freezing.
Killed processes are started again by `restart`; everything is stopped by `close`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from milepost.api import auth
from milepost.conformance.cluster import MILEPOST, free_port, wait_healthy
from milepost.credentials import new_key
from milepost.store.factory import open_store
from milepost.verify.schedule import SERVER

APPROVER = "verify"
"""The user of the suite's approver token (the playbook's `approvers: [user:verify]`)."""


FAULTS = "MILEPOST_FAULT_"
"""The prefix of the settings that inject faults (`engine/faults.py`), passed on."""


class Process:
    """A subprocess in its own session, its output appended to a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.popen: subprocess.Popen[bytes] | None = None
        self.paused = False
        self._out: IO[bytes] | None = None

    def start(self) -> None:
        self._out = self.log.open("ab")
        self.popen = subprocess.Popen(
            self.argv,
            env=self.env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.paused = False

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole group; the process is dead when this returns."""
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(30)
        if self._out is not None:
            self._out.close()
        self.paused = False

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = 15) -> None:
        if self.alive():
            self.resume()
            self.signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                assert self.popen is not None
                self.popen.wait(timeout)
        self.kill()  # what is left of the group (python tool processes)


class Installation:
    """`with Installation(db_url, workdir) as site:` -> `site.url`, the tokens, and the
    processes by name (`server`, `worker-1`...)."""

    def __init__(self, db_url: str, workdir: Path, *, workers: int, lease: float) -> None:
        self.db_url = db_url
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # the installation's own settings, but the injected faults (for testing the suite)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("MILEPOST_") or k.startswith(FAULTS)
        }
        env.update(
            {
                "MILEPOST_DATABASE_URL": db_url,
                "MILEPOST_SECRET_KEY": new_key(),
                "MILEPOST_LEASE_SECONDS": str(lease),
                "MILEPOST_LOG_LEVEL": "INFO",
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.env = env
        store = open_store(db_url)  # migrates the database
        try:
            now = time.time()
            self.admin_token = auth.create_token(store, "admin", "verify", now)
            self.worker_token = auth.create_token(store, "worker", "verify-worker", now)
            self.approver_token = auth.create_token(
                store, "approver", "verify-approver", now, user=APPROVER
            )
        finally:
            store.close()
        server = [
            MILEPOST,
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--db",
            db_url,
        ]
        self.processes = {SERVER: Process(SERVER, server, env, workdir / "server.log")}
        for n in range(1, workers + 1):
            name = f"worker-{n}"
            worker_env = dict(
                env,
                MILEPOST_SERVER_URL=self.url,
                MILEPOST_TOKEN=self.worker_token,
                MILEPOST_WORKER_ID=name,
                MILEPOST_CONCURRENCY="4",
                MILEPOST_PYTHON_WORKERS="2",
                MILEPOST_GRACE_SECONDS="2",
            )
            argv = [sys.executable, "-m", "milepost.verify.journal", str(self.journal(name))]
            self.processes[name] = Process(name, argv, worker_env, workdir / f"{name}.log")
            self.journal(name).unlink(missing_ok=True)  # a kept folder's last suite

    def journal(self, name: str) -> Path:
        """What worker `name` was told the log holds (emptied as the suite starts)."""
        return self.workdir / f"journal-{name}.txt"

    def journals(self) -> list[Path]:
        return [self.journal(name) for name in self.processes if name != SERVER]

    def __enter__(self) -> Installation:
        try:
            self.processes[SERVER].start()
            self.wait_healthy()
            for name, proc in self.processes.items():
                if name != SERVER:
                    proc.start()
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

    def wait_healthy(self, timeout: float = 60.0) -> None:
        server = self.processes[SERVER]
        log = f"(log: {server.log})"
        wait_healthy(
            self.url,
            timeout,
            lambda: None if server.alive() else f"milepost server exited {log}",
            f" {log}",
        )

    def restart(self, name: str) -> None:
        if not self.processes[name].alive():
            self.processes[name].start()

    def heal(self) -> None:
        """Every process running again: the paused resumed, the dead started."""
        for name, proc in self.processes.items():
            if proc.paused:
                proc.resume()
            self.restart(name)

    def close(self) -> None:
        for proc in reversed(list(self.processes.values())):  # workers first
            if proc.popen is not None:
                proc.stop()
