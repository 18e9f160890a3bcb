"""Acting on local runs with the `milepost` command, real processes on one database file
(issue 12): `retry` and `skip` from another terminal while `milepost run` drives the run
(appended behind its log: the driver acts on them), a retry of a run nothing drives goes
on with `milepost resume`, `restart` and `rerun` drive the new run to its end without
running the reused step again, and the refusals are one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from milepost.core import events as ev
from milepost.store.sqlite import SQLiteStore
from tests.e2e.test_approval_wait import WAIT, Cli, env
from tests.shared import wait_for

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: ops, path: tests/ops}\n"
FLOW = """
workflow:
  - step: start
    tool: {kind: python, code: "open('DIR/start', 'a').write('x'); result = {'token': 7}"}
    next: flaky
  - step: flaky
    tool:
      kind: python
      input: {token: "{{ start.token }}"}
      code: |
        import os
        open("DIR/flaky", "a").write("x")
        if not os.path.exists("DIR/fixed"):
            raise RuntimeError("not yet")
        result = {"got": token}
    spec: SPEC
    next: end
  - step: end
    tool: {kind: python, input: {v: "{{ flaky }}"}, code: "result = v"}
"""
WAITS = "{retry: {max_attempts: 3, delay: 3600, retry_on: [exception]}}"


Start = Callable[..., Cli]


@pytest.fixture
def run_in(tmp_path: Path) -> Iterator[Start]:
    """`milepost run` in the background (as in another terminal), killed at the end."""
    started: list[Cli] = []

    def start(*args: str) -> Cli:
        started.append(Cli(tmp_path, "run", "run", *args))
        return started[-1]

    yield start
    for cli in started:
        if cli.proc.poll() is None:
            cli.proc.kill()
            cli.proc.wait(timeout=WAIT)


def write(tmp: Path, spec: str) -> Path:
    path = tmp / "ops.yaml"
    path.write_text(HEADER + textwrap.dedent(FLOW).replace("DIR", str(tmp)).replace("SPEC", spec))
    return path


def milepost(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "milepost.cli", *args],
        env=env(),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )


def log(db: Path, xid: int) -> list[ev.Event]:
    store = SQLiteStore(db)
    try:
        return store.load(xid)
    finally:
        store.close()


def only_run(db: Path) -> int:
    listed = milepost("list", "--json", "--db", str(db))
    [item] = json.loads(listed.stdout)
    return int(item["execution_id"])


def count(tmp: Path, name: str) -> int:
    path = tmp / name
    return len(path.read_text()) if path.exists() else 0


def waiting(tmp: Path, db: Path, cli: Cli) -> int:
    """The run's id once `flaky` failed and its retry waits an hour."""
    wait_for(
        lambda: cli.running() and db.exists() and count(tmp, "flaky") == 1,
        "flaky's first attempt",
        timeout=WAIT,
    )
    xid = wait_for(lambda: only_run(db) if db.exists() else None, "the run", timeout=WAIT)
    wait_for(
        lambda: any(e.event_type == ev.COMMAND_RETRY_SCHEDULED for e in log(db, xid)),
        "the retry timer",
        timeout=WAIT,
    )
    return xid


def test_retry_from_another_terminal_runs_the_waiting_attempt_now(
    tmp_path: Path, run_in: Start
) -> None:
    db = tmp_path / "m.db"
    cli = run_in(str(write(tmp_path, WAITS)), "--db", str(db))
    xid = waiting(tmp_path, db, cli)
    (tmp_path / "fixed").touch()
    done = milepost("retry", str(xid), "flaky", "--user", "oper", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert f"execution {xid}: step flaky retried by user:oper" in done.stdout
    assert f"the process running execution {xid} acts on it now" in done.stdout
    assert cli.ended() == 0, (cli.stdout(), cli.stderr())
    assert count(tmp_path, "flaky") == 2
    [request] = [e for e in log(db, xid) if e.event_type == ev.STEP_RETRY_REQUESTED]
    assert request.payload["actor"] == "user:oper"


def test_skip_from_another_terminal_completes_the_step_and_the_run_goes_on(
    tmp_path: Path, run_in: Start
) -> None:
    db = tmp_path / "m.db"
    cli = run_in(str(write(tmp_path, WAITS)), "--db", str(db), "--json")
    xid = waiting(tmp_path, db, cli)
    done = milepost("skip", str(xid), "flaky", "--result", '{"got": "by hand"}', "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert cli.ended() == 0, (cli.stdout(), cli.stderr())
    summary = json.loads(cli.stdout())
    assert summary["steps"]["flaky"]["result"] == {"got": "by hand"}
    assert summary["steps"]["end"]["result"] == {"got": "by hand"}  # as if flaky produced it
    assert count(tmp_path, "flaky") == 1


def test_a_retry_of_a_run_nothing_drives_goes_on_with_resume(tmp_path: Path, run_in: Start) -> None:
    db = tmp_path / "m.db"
    cli = run_in(str(write(tmp_path, WAITS)), "--db", str(db))
    xid = waiting(tmp_path, db, cli)
    cli.proc.kill()
    cli.proc.wait(timeout=WAIT)
    (tmp_path / "fixed").touch()
    done = milepost("retry", str(xid), "flaky", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert f"`milepost resume {xid}`" in done.stdout
    resumed = milepost("resume", str(xid), "--db", str(db))
    assert resumed.returncode == 0, resumed.stderr
    assert count(tmp_path, "flaky") == 2 and count(tmp_path, "start") == 1


def test_restart_and_rerun_drive_a_new_linked_run_and_refusals_say_why(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    failed = milepost("run", str(write(tmp_path, "{}")), "--db", str(db))
    assert failed.returncode == 1, failed.stderr
    xid = only_run(db)
    ended = milepost("retry", str(xid), "flaky", "--db", str(db))
    assert ended.returncode == 2 and f"milepost restart {xid} --from flaky" in ended.stderr
    assert "Traceback" not in ended.stderr
    (tmp_path / "fixed").touch()
    restarted = milepost("restart", str(xid), "--db", str(db), "--user", "oper")
    assert restarted.returncode == 0, restarted.stderr
    assert f"restarts {xid} from step flaky (reused: start)" in restarted.stdout
    assert count(tmp_path, "start") == 1 and count(tmp_path, "flaky") == 2  # start not again
    new = next(
        int(r["execution_id"])
        for r in json.loads(milepost("list", "--json", "--db", str(db)).stdout)
        if int(r["execution_id"]) != xid
    )
    status = json.loads(milepost("status", str(new), "--json", "--db", str(db)).stdout)
    assert status["restarted_from"] == str(xid) and status["status"] == "COMPLETED"
    assert status["steps"]["end"]["result"] == {"got": 7}  # the reused result flowed on
    rerun = milepost("rerun", str(xid), "--db", str(db), "--json")
    assert rerun.returncode == 0 and json.loads(rerun.stdout)["status"] == "COMPLETED"
    assert count(tmp_path, "start") == 2  # a re-run runs everything
    for args, says in (
        (["restart", str(new)], "only a FAILED or CANCELLED run"),
        (["restart", str(xid), "--from", "nope"], "has no step 'nope'"),
        (["skip", str(xid), "flaky", "--result", "{oops"], "not JSON"),
        (["retry", "12345", "flaky"], "no execution 12345"),
    ):
        refused = milepost(*args, "--db", str(db))
        assert refused.returncode == 2 and says in refused.stderr, (args, refused.stderr)
        assert "Traceback" not in refused.stderr
