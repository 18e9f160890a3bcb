"""`milepost run` waiting for an approval on the local database, with real processes: the
run shows the pending approval and waits; `milepost approve`/`deny` from another process
releases or fails it; Ctrl-C leaves it waiting, and `milepost resume` goes on from the
decision."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from milepost.core import approval_state as ap
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core.approval_state import Voter
from milepost.store.sqlite import SQLiteStore
from tests.shared import clean_env, wait_for

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: refund, path: tests/refund}\n"
GATED = """
workload: {amount: 1200}
workflow:
  - step: start
    tool: {kind: python, code: "open('DIR/started', 'w').write('x'); result = {}"}
    next: [{step: refund}]
  - step: refund
    tool:
      kind: python
      input: {amount: "{{ workload.amount }}"}
      code: |
        open("DIR/refunds", "a").write(str(amount) + "\\n")
        result = {"refunded": amount}
    spec:
      approval:
        approvers: [user:alice, role:finance]
        quorum: 2
        expires_in: 1h
        risk: high
    next: [{step: end}]
  - step: end
    tool: {kind: noop}
"""
ALICE = Voter("user:alice")
CAROL = Voter("user:carol", frozenset({"finance"}))
RUNNER = "user:runner"
"""Who starts the runs ($MILEPOST_USER of the CLI): not an approver."""
WAIT = 60.0


@pytest.fixture
def gated(tmp_path: Path) -> Path:
    path = tmp_path / "refund.yaml"
    path.write_text(HEADER + textwrap.dedent(GATED).replace("DIR", str(tmp_path)))
    return path


def env() -> dict[str, str]:
    return clean_env(MILEPOST_USER=RUNNER.removeprefix("user:"))


class Cli:
    """A `milepost` process whose output goes to files: read while it runs."""

    def __init__(self, tmp_path: Path, name: str, *args: str) -> None:
        self.out, self.err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "milepost.cli", *args],
                env=env(),
                stdout=out,
                stderr=err,
                text=True,
            )

    def running(self) -> bool:
        assert self.proc.poll() is None, (self.stdout(), self.stderr())
        return True

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def ended(self) -> int:
        return self.proc.wait(timeout=WAIT)


@pytest.fixture
def clis(tmp_path: Path) -> Iterator[Any]:
    started: list[Cli] = []

    def start(name: str, *args: str) -> Cli:
        started.append(Cli(tmp_path, name, *args))
        return started[-1]

    yield start
    for cli in started:
        if cli.proc.poll() is None:
            cli.proc.kill()
            cli.proc.wait(timeout=30)


@contextlib.contextmanager
def opened(db: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(db)
    try:
        yield store
    finally:
        store.close()


def requested(tmp_path: Path, db: Path, cli: Cli) -> tuple[int, int]:
    """(execution id, approval id) once the run's approval is requested; the run ending
    first fails at once."""
    # the database is migrated once the first step ran
    wait_for(
        lambda: cli.running() and (tmp_path / "started").exists(),
        "the run's first step",
        timeout=WAIT,
    )
    with opened(db) as store:

        def asked() -> tuple[int, int] | None:
            cli.running()
            for row in store.list_executions():
                for event in store.load(row.execution_id):
                    if event.event_type == ev.APPROVAL_REQUESTED:
                        return row.execution_id, int(event.payload["approval_id"])
            return None

        return wait_for(asked, "the approval request", timeout=WAIT)


def milepost(*args: str) -> subprocess.CompletedProcess[str]:
    """`milepost <args>` run to its end from another terminal; it must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", "milepost.cli", *args],
        env=env(),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done


def decide(
    db: Path, approval_id: int, voter: Voter, decision: str = "approve", reason: str | None = None
) -> None:
    """`milepost approve` (or `deny`) from another terminal on the same database: the vote
    is appended behind the log, the process driving the run acts on it."""
    args = [
        decision,
        str(approval_id),
        "--db",
        str(db),
        "--user",
        voter.identity.removeprefix("user:"),
    ]
    args += [arg for role in sorted(voter.roles) for arg in ("--role", role)]
    args += ["--reason", reason] if reason is not None else []
    milepost(*args)


def status(db: Path, xid: int) -> str:
    return milepost("status", str(xid), "--db", str(db)).stdout


def refunds(tmp_path: Path) -> list[str]:
    path = tmp_path / "refunds"
    return path.read_text().splitlines() if path.exists() else []


def folded(db: Path, xid: int) -> st.ExecutionState:
    with opened(db) as store:
        return fl.fold(None, store.load(xid))


def issued(db: Path, xid: int, step: str) -> int:
    with opened(db) as store:
        return sum(
            1 for e in store.load(xid) if e.event_type == ev.COMMAND_ISSUED and e.step == step
        )


def test_run_shows_the_approval_and_votes_from_another_process_release_it(
    tmp_path: Path, gated: Path, clis: Any
) -> None:
    db = tmp_path / "m.db"
    cli = clis("run", "run", str(gated), "--db", str(db))
    xid, aid = requested(tmp_path, db, cli)
    decide(db, aid, ALICE, reason="checked the invoice")
    # one vote of two: the run goes on waiting, and its display shows the vote
    wait_for(
        lambda: cli.running() and "(1/2 approvals)" in cli.stdout(), "the vote shown", timeout=WAIT
    )
    assert refunds(tmp_path) == []
    decide(db, aid, CAROL)
    assert cli.ended() == 0, (cli.stdout(), cli.stderr())
    stdout = cli.stdout()
    assert refunds(tmp_path) == ["1200"]  # the tool ran once
    assert issued(db, xid, "refund") == 1
    # what it showed while it waited: the call, the risk, who decides, time left, how
    assert f"approval {aid} · step refund · execution {xid} · risk high" in stdout
    assert 'open("' in stdout and 'input: {"amount": 1200}' in stdout
    assert "who may decide: user:alice, role:finance · quorum 2 · votes 0/2" in stdout
    assert re.search(r"time left: 59m \d\ds", stdout)
    assert f"milepost approve {aid} --db {db}" in stdout
    assert f'milepost deny {aid} --reason "..." --db {db}' in stdout
    # then each vote (another process's, seen by the display) and the grant, in order
    first = stdout.index(
        f"approval {aid}: user:alice approved: checked the invoice (1/2 approvals)"
    )
    second = stdout.index(f"approval {aid}: user:carol approved (2/2 approvals)")
    granted = stdout.index(f"approval {aid} (refund): granted by user:alice, user:carol")
    assert first < second < granted < stdout.index(f"execution {xid} COMPLETED")


def test_a_deny_from_another_process_fails_the_run_with_the_reason(
    tmp_path: Path, gated: Path, clis: Any
) -> None:
    db = tmp_path / "m.db"
    cli = clis("run", "run", str(gated), "--db", str(db))
    xid, aid = requested(tmp_path, db, cli)
    decide(db, aid, CAROL, "deny", "duplicate refund")
    assert cli.ended() == 1, (cli.stdout(), cli.stderr())
    stdout = cli.stdout()
    assert f"approval {aid} (refund): denied by user:carol: duplicate refund" in stdout
    assert f"execution {xid} FAILED" in stdout
    assert (
        "reason: step 'refund' failed: approval rejected by user:carol: duplicate refund" in stdout
    )
    assert refunds(tmp_path) == []
    assert issued(db, xid, "refund") == 0
    assert f"approval {aid} (step refund): denied by user:carol: duplicate refund" in status(
        db, xid
    )


def test_ctrl_c_while_waiting_leaves_the_run_and_resume_goes_on_from_the_decision(
    tmp_path: Path, gated: Path, clis: Any
) -> None:
    db = tmp_path / "m.db"
    cli = clis("run", "run", str(gated), "--db", str(db), "--json")
    xid, aid = requested(tmp_path, db, cli)
    cli.proc.send_signal(signal.SIGINT)
    assert cli.ended() == 130, (cli.stdout(), cli.stderr())
    stderr = cli.stderr()
    assert cli.stdout() == ""  # --json: no final state to print; the messages go to stderr
    assert f"interrupted: execution {xid} is left RUNNING" in stderr
    assert (
        f"approval {aid} (step refund) waits for a decision: milepost approve {aid} --db {db}"
        in stderr
    )
    assert f"to go on: milepost resume {xid} --db {db}" in stderr
    # the run is left as it was: RUNNING, its approval pending, its driver lease released
    state = folded(db, xid)
    assert state.status == st.RUNNING
    assert state.approvals[aid].status == ap.PENDING
    with opened(db) as store:
        lease = store.get_driver(xid)
    assert lease is not None and lease.expires_at <= time.time()
    shown = status(db, xid)
    assert re.search(
        rf"approval {aid} \(step refund\): pending · risk high · votes 0/2 · who may "
        r"decide: user:alice, role:finance · time left: 59m \d\ds",
        shown,
    ), shown

    # decided while nobody drives it: `resume` grants it and issues the command once
    decide(db, aid, ALICE)
    decide(db, aid, CAROL)
    resumed = milepost("resume", str(xid), "--db", str(db), "--json")
    data = json.loads(resumed.stdout)
    assert data["status"] == "COMPLETED"
    assert data["steps"]["refund"]["approval"]["outcome"] == "granted by user:alice, user:carol"
    assert refunds(tmp_path) == ["1200"]
    assert issued(db, xid, "refund") == 1
    # the approval's story on stderr, told from the start of the log
    assert f"approval {aid} (refund): granted by user:alice, user:carol" in resumed.stderr
    assert f"approval {aid} (step refund): granted by user:alice, user:carol" in status(db, xid)


def test_ctrl_c_of_resume_while_waiting_says_the_same_and_keeps_the_run(
    tmp_path: Path, gated: Path, clis: Any
) -> None:
    db = tmp_path / "m.db"
    first = clis("run", "run", str(gated), "--db", str(db), "--json")
    xid, aid = requested(tmp_path, db, first)
    first.proc.send_signal(signal.SIGINT)
    assert first.ended() == 130
    again = clis("resume", "resume", str(xid), "--db", str(db))
    # the resumed driver shows the pending approval, read from the log, and waits
    wait_for(
        lambda: again.running() and f"milepost approve {aid} --db {db}" in again.stdout(),
        "the resumed run's pending approval",
        timeout=WAIT,
    )
    again.proc.send_signal(signal.SIGINT)
    assert again.ended() == 130, (again.stdout(), again.stderr())
    assert f"to go on: milepost resume {xid} --db {db}" in again.stderr()
    assert folded(db, xid).approvals[aid].status == ap.PENDING
    assert refunds(tmp_path) == []


def test_ctrl_c_while_a_step_runs_leaves_the_run_for_resume_to_finish(
    tmp_path: Path, clis: Any
) -> None:
    pb = tmp_path / "slow.yaml"
    pb.write_text(
        HEADER
        + textwrap.dedent(f"""
    workflow:
      - step: start
        tool:
          kind: python
          code: |
            import os, time
            open("{tmp_path}/started", "a").write("x")
            deadline = time.monotonic() + 120
            while not os.path.exists("{tmp_path}/gate") and time.monotonic() < deadline:
                time.sleep(0.01)
            result = {{"ok": True}}
    """)
    )
    db = tmp_path / "m.db"
    cli = clis("run", "run", str(pb), "--db", str(db))
    wait_for(
        lambda: cli.running() and (tmp_path / "started").exists(), "the step to start", timeout=WAIT
    )
    cli.proc.send_signal(signal.SIGINT)
    assert cli.ended() == 130, (cli.stdout(), cli.stderr())
    with opened(db) as store:
        (row,) = store.list_executions()
        lease = store.get_driver(row.execution_id)
    xid = row.execution_id
    assert row.status == st.RUNNING
    assert lease is not None and lease.expires_at <= time.time()
    stderr = cli.stderr()
    assert f"interrupted: execution {xid} is left RUNNING" in stderr
    assert "waits for a decision" not in stderr  # no approval pending: only how to go on
    assert f"to go on: milepost resume {xid} --db {db}" in stderr
    (tmp_path / "gate").write_text("open")
    resumed = milepost("resume", str(xid), "--db", str(db), "--json")
    assert json.loads(resumed.stdout)["steps"]["start"]["result"] == {"ok": True}
