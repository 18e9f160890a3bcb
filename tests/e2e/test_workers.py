"""`milepost workers` on the local database: the in-process workers of a `milepost run`
are listed while it runs, with the step they run, and gone after a clean exit; a run
killed with SIGKILL leaves them lost once their ttl passes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_cli import MILEPOST, cli, write
from tests.shared import wait_for

HOLD = """\
workload: {marker: "", block: ""}
workflow:
  - step: hold
    tool:
      kind: python
      input: {marker: "{{ workload.marker }}", block: "{{ workload.block }}"}
      code: |
        import os, time
        open(marker, "w").close()
        deadline = time.time() + 60
        while os.path.exists(block) and time.time() < deadline:
            time.sleep(0.02)
        result = "released"
"""


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, Path]]:
    """A `milepost run` whose step waits while `block` exists (a 2 s lease and driver ttl:
    its in-process workers are lost 2 s after it stops checking in)."""
    marker, block = tmp_path / "started", tmp_path / "block"
    block.touch()
    pb = write(tmp_path, HOLD)
    env = {**os.environ, "MILEPOST_LEASE_SECONDS": "2", "MILEPOST_DRIVER_TTL": "2"}
    proc = subprocess.Popen(
        [
            MILEPOST,
            "run",
            str(pb),
            "--json",
            "--db",
            str(tmp_path / "m.db"),
            "--set",
            f"marker={marker}",
            "--set",
            f"block={block}",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: marker.exists() or proc.poll() is not None, "the step to start", timeout=60
        )
        assert proc.poll() is None, proc.communicate()
        yield proc, block, tmp_path / "m.db"
    finally:
        with contextlib.suppress(ProcessLookupError):  # its python processes too
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ValueError):  # the test read its output already
            proc.communicate(timeout=30)


def workers(db: Path, *args: str) -> list[dict[str, Any]]:
    done = cli("workers", "--json", *args, db=db)
    assert done.returncode == 0, done.stderr
    listed: list[dict[str, Any]] = json.loads(done.stdout)
    return listed


def table(db: Path, *args: str) -> str:
    """The table as a wide terminal shows it, on one line."""
    done = subprocess.run(
        [MILEPOST, "workers", *args, "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


def test_the_in_process_workers_of_a_run_are_listed_while_it_runs(
    held: tuple[subprocess.Popen[str], Path, Path],
) -> None:
    proc, block, db = held
    [worker] = workers(db)
    assert worker["kind"] == "embedded" and worker["pools"] == ["default"]
    assert worker["status"] == "live" and worker["pid"] == proc.pid
    assert worker["name"].startswith("embedded:") and worker["ttl"] == 2.0
    assert [r["step"] for r in worker["running"]] == ["hold"]
    assert workers(db, "--status", "lost") == [] and workers(db, "--pool", "gpu") == []
    shown = table(db)
    assert "embedded" in shown and "live" in shown and "1 (hold)" in shown
    # the started time with its milliseconds, as every table shows a time
    started = worker["started_at"].replace("T", " ").removesuffix("+00:00")
    assert re.search(r"\d\d:\d\d:\d\d\.\d{3}$", started) and started in shown, shown
    block.unlink()
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["steps"]["hold"]["result"] == "released"
    assert workers(db) == []  # a clean exit takes its workers out
    assert table(db) == "no workers"


def test_a_killed_run_leaves_its_workers_lost(
    held: tuple[subprocess.Popen[str], Path, Path],
) -> None:
    proc, _, db = held
    os.killpg(proc.pid, signal.SIGKILL)  # the machine dies: its python processes too
    proc.wait(30)
    [lost] = wait_for(
        lambda: workers(db, "--status", "lost"), "the killed run's workers to be lost", timeout=30
    )
    assert lost["pid"] == proc.pid and [r["step"] for r in lost["running"]] == ["hold"]
    assert workers(db, "--status", "live") == []
    assert table(db, "--status", "live") == "no live workers"


def test_a_bad_filter_is_refused_without_a_traceback(tmp_path: Path) -> None:
    for args, message in (
        (["--status", "dead"], "--status 'dead': use live or lost"),
        (["--pool", "a b"], "--pool 'a b': a pool is a name"),
    ):
        done = cli("workers", *args, db=tmp_path / "m.db")
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
