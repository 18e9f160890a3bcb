"""End to end through the `milepost` command, as a user runs it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.acceptance.harness import free_port
from tests.children_world import CHILD
from tests.pg import PgDatabases, session_databases
from tests.shared import PLAYBOOKS, clean_env, needs_shared, wait_for

MILEPOST = str(Path(sys.executable).with_name("milepost"))
HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/t}\n"


def cli(*args: str, db: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MILEPOST, *args, "--db", str(db)], capture_output=True, text=True, timeout=timeout
    )


def write(tmp: Path, body: str, name: str = "pb.yaml") -> Path:
    path = tmp / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def run_json(tmp: Path, body: str, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = cli("run", str(write(tmp, body)), "--json", *extra, db=tmp / "m.db")
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@needs_shared
def test_run_hello_world_prints_results_and_exits_zero(tmp_path: Path) -> None:
    proc = cli(
        "run", str(PLAYBOOKS / "hello_world" / "hello_world.yaml"), "--json", db=tmp_path / "m.db"
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "COMPLETED" and data["error"] is None
    assert data["steps"]["test_step"]["result"] == {
        "status": "ok",
        "data": {"message": "Hello World"},
    }
    listed = json.loads(cli("list", "--json", db=tmp_path / "m.db").stdout)
    assert [x["execution_id"] for x in listed] == [data["execution_id"]]
    assert listed[0]["status"] == "COMPLETED"


def test_set_and_payload_reach_the_workload(tmp_path: Path) -> None:
    code, data = run_json(
        tmp_path,
        """
    workload: {a: 1, nested: {x: 1, y: 2}}
    workflow:
      - step: start
        tool: {kind: python, input: {w: "{{ workload }}"}, code: "result = w"}
    """,
        "--payload",
        '{"nested": {"y": 20}, "b": "p"}',
        "--set",
        "a=5",
        "--set",
        "nested.z=true",
    )
    assert code == 0
    assert data["steps"]["start"]["result"] == {
        "a": 5,
        "b": "p",
        "nested": {"x": 1, "y": 20, "z": True},
    }


FAILURES = {
    "bad template": (
        """
        workflow:
          - step: start
            tool: {kind: python, input: {v: "{{ nope.deeper }}"}, code: "result = 1"}
        """,
        r"step 'start': input 'v': undefined",
    ),
    "python raises": (
        """
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1 / 0"}
        """,
        r"step 'start' failed: ZeroDivisionError: division by zero",
    ),
    "timeout": (
        """
        workflow:
          - step: start
            spec: {timeout: 1s}
            tool: {kind: python, code: "import time; time.sleep(60)"}
        """,
        r"step 'start' failed: .*timeout",
    ),
    "loop over a string": (
        """
        workflow:
          - step: start
            loop: {in: "{{ 'abc' }}"}
            tool: {kind: noop}
        """,
        r"'in' rendered str, not a list",
    ),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_failing_runs_end_failed_with_the_reason_in_run_and_status(
    tmp_path: Path, case: str
) -> None:
    body, pattern = FAILURES[case]
    code, data = run_json(tmp_path, body)
    assert code == 1
    assert data["status"] == "FAILED"
    assert data["error"]["reason"] and __import__("re").search(pattern, data["error"]["reason"])
    status = cli("status", data["execution_id"], "--json", db=tmp_path / "m.db")
    assert json.loads(status.stdout)["error"]["reason"] == data["error"]["reason"]
    human = cli("status", data["execution_id"], db=tmp_path / "m.db")
    assert "FAILED" in human.stdout and "reason" in human.stdout


def test_invalid_playbook_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    code, data = run_json(
        tmp_path,
        """
    workflow:
      - step: start
        tool: {kind: noop}
        next: {arcs: [{step: nowhere}]}
      - step: other
    """,
    )
    assert code == 1 and data["status"] == "FAILED" and data["execution_id"] is None
    problems = data["error"]["problems"]
    assert any("unknown step 'nowhere'" in p for p in problems)
    assert any("step 'other'" in p and "tool" in p for p in problems)
    assert not (tmp_path / "m.db").exists()


@needs_shared
def test_validate_lists_every_problem(tmp_path: Path) -> None:
    broken = PLAYBOOKS / "broken_playbooks" / "should_error_tool_is_required.yaml"
    good = PLAYBOOKS / "hello_world" / "hello_world.yaml"
    proc = subprocess.run(
        [MILEPOST, "validate", str(good), str(broken)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert "hello_world.yaml" in proc.stdout
    assert "step 'end': field 'tool' is required" in proc.stderr
    assert "unknown field 'command' (did you mean tool.command?)" in proc.stderr


def test_validate_prints_each_file_with_its_problems_as_json_or_yaml(tmp_path: Path) -> None:
    good = write(tmp_path, "workflow:\n  - step: start\n    tool: {kind: noop}\n", "good.yaml")
    typo = write(
        tmp_path,
        "workflow:\n  - step: start\n    tool: {kind: http, url: 'http://x', methd: POST}\n",
        "typo.yaml",
    )
    broken = write(tmp_path, "workflow:\n  - step: start\n", "broken.yaml")
    files = [str(good), str(typo), str(broken)]
    proc = subprocess.run(
        [MILEPOST, "validate", *files, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    checked = json.loads(proc.stdout)  # one document, nothing else on stdout
    assert [c["file"] for c in checked] == files
    assert [c["valid"] for c in checked] == [True, True, False]
    assert checked[0] == {
        "file": str(good),
        "valid": True,
        "steps": 1,
        "problems": [],
        "warnings": [],
    }
    assert any("did you mean 'method'" in w for w in checked[1]["warnings"])
    assert checked[2]["steps"] is None
    assert any("field 'tool' is required" in p for p in checked[2]["problems"])
    strict = subprocess.run(
        [MILEPOST, "validate", str(typo), "--strict", "-o", "yaml"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert strict.returncode == 1
    [refused] = yaml.safe_load(strict.stdout)
    assert refused["valid"] is False and refused["warnings"] == []
    assert any("did you mean 'method'" in p for p in refused["problems"])
    alone = subprocess.run(
        [MILEPOST, "validate", str(good), "--json"], capture_output=True, text=True, timeout=60
    )
    assert alone.returncode == 0 and json.loads(alone.stdout)[0]["valid"] is True
    # the table as before: a line per file
    table = subprocess.run(
        [MILEPOST, "validate", str(good)], capture_output=True, text=True, timeout=60
    )
    assert table.stdout.startswith(f"✓ {good} (1 steps)"), table.stdout


def test_register_of_an_invalid_file_as_json_names_its_problems(tmp_path: Path) -> None:
    broken = write(tmp_path, "workflow:\n  - step: start\n", "broken.yaml")
    # checked before the server is asked: none listens on port 9
    proc = subprocess.run(
        [MILEPOST, "register", str(broken), "--server", "http://127.0.0.1:9", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "field 'tool' is required" in proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["file"] == str(broken) and shown["registered"] is False
    assert any("field 'tool' is required" in p for p in shown["problems"])


def test_events_lists_the_log(tmp_path: Path) -> None:
    code, data = run_json(
        tmp_path,
        """
    workflow:
      - step: start
        tool: {kind: noop}
    """,
    )
    proc = cli("events", data["execution_id"], "--json", db=tmp_path / "m.db")
    types = [json.loads(line)["event_type"] for line in proc.stdout.splitlines()]
    # the in-process worker claims the command like a remote one: the claim is in the log
    assert types == [
        "execution.started",
        "step.enter",
        "command.issued",
        "command.claimed",
        "command.completed",
        "step.exit",
        "execution.completed",
    ]


KILLABLE = """
workload: {out: OUT, n: 40}
workflow:
  - step: start
    tool:
      kind: python
      input: {out: "{{ workload.out }}"}
      code: |
        with open(out, "a") as f:
            f.write(f"start {idempotency_key}\\n")
        result = {"ok": True}
    next: work
  - step: work
    loop: {in: "{{ range(workload.n) | list }}", iterator: i}
    tool:
      kind: python
      input: {out: "{{ workload.out }}", i: "{{ i }}"}
      code: |
        import time
        with open(out, "a") as f:
            f.write(f"{i} {idempotency_key}\\n")
        time.sleep(0.05)
        result = i
    next: done
  - step: done
    tool: {kind: python, input: {xs: "{{ work }}"}, code: "result = {'sum': sum(xs)}"}
"""


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen[str]) -> None:
    """Until the run has made `n` side effects; its process ending first fails at once."""

    def made() -> bool:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return True
        assert proc.poll() is None, "the run ended before it could be killed"
        return False

    wait_for(made, f"{n} side effects in {path.name}", timeout=60)


def test_sigkill_then_resume_continues_without_repeating_completed_steps(tmp_path: Path) -> None:
    out = tmp_path / "effects.txt"
    pb = write(tmp_path, KILLABLE.replace("OUT", str(out)))
    db = tmp_path / "m.db"
    proc = subprocess.Popen(
        [MILEPOST, "run", str(pb), "--json", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_lines(out, 10, proc)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    listed = json.loads(cli("list", "--json", db=db).stdout)
    assert len(listed) == 1 and listed[0]["status"] == "RUNNING"
    before = out.read_text().splitlines()
    assert len(before) < 41  # really killed mid-run

    resumed = cli("resume", listed[0]["execution_id"], "--json", db=db)
    assert resumed.returncode == 0, resumed.stderr
    data = json.loads(resumed.stdout)
    assert data["status"] == "COMPLETED"
    assert data["steps"]["done"]["result"] == {"sum": sum(range(40))}

    lines = out.read_text().splitlines()
    names = [line.split()[0] for line in lines]
    assert names.count("start") == 1  # a completed step is not run again
    assert sorted(set(names) - {"start"}, key=int) == [str(i) for i in range(40)]
    repeats = {n for n in names if names.count(n) > 1}
    # at most the iteration that was in flight at the kill runs twice, with the same key
    assert len(repeats) <= 1
    for n in repeats:
        assert len({line for line in lines if line.split()[0] == n}) == 1


def test_cancel_from_another_process_stops_the_run_at_a_step_boundary(tmp_path: Path) -> None:
    out = tmp_path / "effects.txt"
    pb = write(tmp_path, KILLABLE.replace("OUT", str(out)))
    db = tmp_path / "m.db"
    # 400 iterations of 50 ms: far longer than a cancel takes to arrive, even on a busy machine
    proc = subprocess.Popen(
        [MILEPOST, "run", str(pb), "--json", "--db", str(db), "--set", "n=400"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_lines(out, 5, proc)
        xid = json.loads(cli("list", "--json", db=db).stdout)[0]["execution_id"]
        asked = cli("cancel", xid, db=db)
        assert asked.returncode == 0, asked.stderr
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (stdout, stderr)
    data = json.loads(stdout)
    assert data["status"] == "CANCELLED"
    assert "done" not in data["steps"]
    assert len(out.read_text().splitlines()) < 401  # the loop stopped early
    again = cli("cancel", xid, db=db)
    assert again.returncode == 2 and "already CANCELLED" in again.stderr


def test_a_registered_credential_reaches_the_step_and_never_the_log(tmp_path: Path) -> None:
    key = subprocess.run(
        [MILEPOST, "secret-key"], capture_output=True, text=True, timeout=60
    ).stdout.strip()
    env = dict(os.environ, MILEPOST_SECRET_KEY=key)
    db = tmp_path / "m.db"
    secret = "cli-Secret-0042"
    made = subprocess.run(
        [
            MILEPOST,
            "credential",
            "set",
            "api",
            "--type",
            "generic",
            "--data",
            json.dumps({"user": "ada", "password": secret}),
            "--db",
            str(db),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    pb = write(
        tmp_path,
        """
    keychain: [{name: api, kind: credential, credential: api}]
    workflow:
      - step: start
        tool: {kind: python, input: {pw: "{{ keychain.api.password }}"},
               code: "result = {'said': 'pw=' + pw, 'n': len(pw)}"}
    """,
    )
    proc = subprocess.run(
        [MILEPOST, "run", str(pb), "--json", "--db", str(db)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["steps"]["start"]["result"] == {"said": "pw=***", "n": len(secret)}
    files = sorted(tmp_path.glob("m.db*"))  # the database and its WAL
    assert db in files and all(secret.encode() not in f.read_bytes() for f in files)
    assert any(
        b"keychain" in f.read_bytes() or b"execution.started" in f.read_bytes() for f in files
    )  # the files read do hold the run
    listed = subprocess.run(
        [MILEPOST, "credential", "list", "--json", "--db", str(db)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert [(c["name"], c["type"]) for c in json.loads(listed.stdout)] == [("api", "generic")]
    without = subprocess.run(
        [MILEPOST, "run", str(pb), "--json", "--db", str(db)],
        env={k: v for k, v in env.items() if k != "MILEPOST_SECRET_KEY"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert without.returncode == 1
    assert "not registered" in json.loads(without.stdout)["error"]["reason"]


GATED = """
workload: {out: OUT, gate: GATE, n: 6}
workflow:
  - step: work
    loop: {in: "{{ range(workload.n) | list }}", iterator: i}
    tool:
      kind: python
      input: {out: "{{ workload.out }}", gate: "{{ workload.gate }}", i: "{{ i }}"}
      code: |
        import os, time
        with open(out, "a") as f:
            f.write(f"{i} {idempotency_key}\\n")
        deadline = time.monotonic() + 120
        while i == 2 and not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.02)
        result = i
"""


def _event_count(db: Path, xid: str) -> int:
    return len(cli("events", xid, "--json", db=db).stdout.splitlines())


def test_resume_of_a_run_another_live_process_drives_is_refused(tmp_path: Path) -> None:
    out, gate = tmp_path / "effects.txt", tmp_path / "gate"
    pb = write(tmp_path, GATED.replace("OUT", str(out)).replace("GATE", str(gate)))
    db = tmp_path / "m.db"
    driver = subprocess.Popen(
        [MILEPOST, "run", str(pb), "--json", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_lines(out, 3, driver)  # iteration 2 waits at the gate
        xid = json.loads(cli("list", "--json", db=db).stdout)[0]["execution_id"]
        before = _event_count(db, xid)
        for args in ((), ("--json",)):
            refused = cli("resume", xid, *args, db=db)
            assert refused.returncode == 2, refused.stdout
            assert re.search(
                rf"execution {xid} is driven by {re.escape(socket.gethostname())}"
                rf":{driver.pid}:\w+ until \d{{4}}-\d\d-\d\dT",
                refused.stderr,
            )
            assert "started" not in refused.stdout and not refused.stdout.strip()
        assert _event_count(db, xid) == before  # the refused resumes wrote nothing
        gate.touch()
        stdout, stderr = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, stderr
    assert json.loads(stdout)["steps"]["work"]["result"] == list(range(6))
    names = [line.split()[0] for line in out.read_text().splitlines()]
    assert names == [str(i) for i in range(6)]  # every iteration written once, by one process


def test_resume_of_an_ended_run_says_so_and_exits_with_its_outcome(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    _, done = run_json(
        tmp_path,
        """
    workflow:
      - step: start
        tool: {kind: noop}
    """,
    )
    _, failed = run_json(tmp_path, FAILURES["python raises"][0])
    for data, code in ((done, 0), (failed, 1)):
        xid = data["execution_id"]
        before = _event_count(db, xid)
        human = cli("resume", xid, db=db)
        assert human.returncode == code, human.stderr
        assert re.match(
            rf"execution {xid} is {data['status']} \(ended \d{{4}}-\d\d-\d\dT[\d:]+"
            r"\.\d{3}\+00:00\); nothing to resume\n",
            human.stdout,
        )
        assert "started" not in human.stdout
        if code:
            assert "reason: step 'start' failed: ZeroDivisionError" in human.stdout
        as_json = cli("resume", xid, "--json", db=db)
        assert as_json.returncode == code
        assert json.loads(as_json.stdout)["status"] == data["status"]
        assert "nothing to resume" in as_json.stderr
        assert _event_count(db, xid) == before


def test_resume_of_a_run_a_server_started_is_refused(tmp_path: Path) -> None:
    from tests.api.support import start_server

    db = tmp_path / "m.db"
    with start_server(f"sqlite:///{db}") as api:
        xid = api.execute()  # no worker: it stays RUNNING, its first command queued
        before = api.store.event_count(int(xid))
        refused = cli("resume", xid, db=db)
        assert refused.returncode == 2
        assert f"execution {xid} is driven by the server" in refused.stderr
        assert api.store.event_count(int(xid)) == before
        assert api.store.get_driver(int(xid)) is None


def test_a_stopped_driver_that_wakes_after_a_take_over_writes_nothing_more(tmp_path: Path) -> None:
    out = tmp_path / "effects.txt"
    # each iteration idles for most of its time, so the stop lands between transactions
    pb = write(
        tmp_path, KILLABLE.replace("OUT", str(out)).replace("time.sleep(0.05)", "time.sleep(0.3)")
    )
    db = tmp_path / "m.db"
    env = dict(os.environ, MILEPOST_DRIVER_TTL="1")
    first = subprocess.Popen(
        [MILEPOST, "run", str(pb), "--json", "--db", str(db), "--set", "n=12"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    second: subprocess.Popen[str] | None = None
    try:
        _wait_for_lines(out, 4, first)
        os.kill(first.pid, signal.SIGSTOP)  # alive, but renewing nothing
        xid = json.loads(cli("list", "--json", db=db).stdout)[0]["execution_id"]
        wait_for(
            lambda: _driver_expires_at(db, xid) <= time.time(),
            "the stopped driver's lease to expire",
            timeout=30,
        )
        second = subprocess.Popen(
            [MILEPOST, "resume", xid, "--json", "--db", str(db)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # the second process drives now
        _wait_for_lines(out, len(out.read_text().splitlines()) + 2, second)
        os.kill(first.pid, signal.SIGCONT)
        _, first_err = first.communicate(timeout=60)
        second_out, second_err = second.communicate(timeout=120)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
    assert first.returncode == 2
    assert re.search(
        rf"execution {xid} was taken over by {re.escape(socket.gethostname())}"
        rf":{second.pid}:\w+; this process stopped driving it",
        first_err,
    )
    assert second.returncode == 0, second_err
    assert json.loads(second_out)["steps"]["done"]["result"] == {"sum": sum(range(12))}
    names = [line.split()[0] for line in out.read_text().splitlines()]
    assert sorted(set(names) - {"start"}, key=int) == [str(i) for i in range(12)]
    assert len(names) - len(set(names)) <= 1  # only the iteration in flight at the stop, again
    log = [json.loads(line) for line in cli("events", xid, "--json", db=db).stdout.splitlines()]
    reports = [e for e in log if e["event_type"] == "command.completed" and e["step"] == "work"]
    assert len(reports) == 12  # the woken process's late report was never appended


def _driver_expires_at(db: Path, xid: str) -> float:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        row = conn.execute(
            "SELECT expires_at FROM execution_driver WHERE execution_id=?", (int(xid),)
        ).fetchone()
    return float(row[0])


def test_two_runs_at_once_on_one_database_file_both_finish_every_item(tmp_path: Path) -> None:
    """Issue 8, item 3: the default file is shared by every terminal in a folder. Two runs
    minting ids on one machine id lost each other's events and hung, commands queued."""
    from milepost.store.sqlite import SQLiteStore

    n = 600
    # a gate step holds each run until both are up, so their loops run at the same time
    pb = write(
        tmp_path,
        f"""
    workflow:
      - step: gate
        tool:
          kind: python
          input: {{d: "{tmp_path}"}}
          code: |
            import os, time, uuid
            open(os.path.join(d, "ready-" + uuid.uuid4().hex), "w").close()
            deadline = time.time() + 60
            while not os.path.exists(os.path.join(d, "go")) and time.time() < deadline:
                time.sleep(0.002)
            result = 1
        next: each
      - step: each
        loop:
          in: "{{{{ range({n}) | list }}}}"
          iterator: i
          spec: {{mode: parallel, max_in_flight: 50}}
        tool: {{kind: noop}}
    """,
    )
    db = tmp_path / "m.db"
    procs = [
        subprocess.Popen(
            [MILEPOST, "run", str(pb), "--json", "--db", str(db)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = []
    try:

        def ready() -> bool:
            assert all(p.poll() is None for p in procs), "a run ended before the start signal"
            return len(list(tmp_path.glob("ready-*"))) >= 2

        wait_for(ready, "both runs at the start line", timeout=60)
        (tmp_path / "go").touch()
        for proc in procs:
            outs.append(proc.communicate(timeout=60))  # a hang fails here
    finally:
        for proc in procs:
            proc.kill()
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    xids = {int(json.loads(out)["execution_id"]) for out, _ in outs}
    assert len(xids) == 2
    store = SQLiteStore(db)
    try:
        for xid in xids:
            row = store.get_execution(xid)
            assert row is not None and row.status == "COMPLETED"
            types = [e.event_type for e in store.load(xid)]
            assert types.count("execution.started") == 1, xid
            assert types.count("command.completed") == n + 1 and types[-1] == "execution.completed"
            assert store.open_commands(xid) == []
        # each run leased its own machine id and gave it back (its row stays, lapsed)
        leases = store.machine_leases()
        assert len(leases) == 2 and all(lease.expires_at <= time.time() for lease in leases)
    finally:
        store.close()


# -- issue 33, item 13: the local catalog; an unreachable PostgreSQL ---------------------------

PARENT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: parent, path: tests/parent}
workflow:
  - step: start
    tool: {kind: playbook, path: tests/child, input: {x: 21}, return_result: true}
"""


@pytest.fixture(scope="module")
def pg() -> Iterator[PgDatabases]:
    yield from session_databases("milepost_cli")


@pytest.fixture(params=["sqlite", "postgres"])
def local_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database `milepost run` drives embedded: a new SQLite file, or an empty
    PostgreSQL database (a write makes its tables)."""
    if request.param == "sqlite":
        yield str(tmp_path / "m.db")
        return
    dbs: PgDatabases = request.getfixturevalue("pg")
    url = dbs.create(empty=True)
    try:
        yield url
    finally:
        dbs.drop(url)


def test_register_fills_the_local_catalog_for_an_embedded_parent(
    tmp_path: Path, local_db: str
) -> None:
    # before: `register` took no --db (only a server's catalog), so an embedded parent
    # found its child only after the child had been run once
    (tmp_path / "child.yaml").write_text(CHILD)
    (tmp_path / "parent.yaml").write_text(PARENT)
    env = clean_env()
    registered = subprocess.run(
        [MILEPOST, "register", str(tmp_path / "child.yaml"), "--db", local_db, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert registered.returncode == 0, registered.stderr
    assert json.loads(registered.stdout) | {"created_at": None} == {
        "file": str(tmp_path / "child.yaml"),
        "registered": True,
        "path": "tests/child",
        "version": 1,
        "catalog_id": "tests/child@1",
        "created_at": None,
    }
    ran = subprocess.run(
        [MILEPOST, "run", str(tmp_path / "parent.yaml"), "--db", local_db, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["steps"]["start"]["result"] == {"double": 42}


def test_an_unreachable_postgresql_is_said_once_and_exits_3(tmp_path: Path) -> None:
    # before: four "error connecting in 'milepost'" lines from the pool's retries, then
    # "pool initialization incomplete after 10.0 sec", 10 to 14 s later
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/milepost"  # nobody listens there
    (tmp_path / "child.yaml").write_text(CHILD)
    for args in (["list"], ["run", str(tmp_path / "child.yaml")], ["db", "upgrade"]):
        done = subprocess.run(
            [MILEPOST, *args, "--db", url],
            capture_output=True,
            text=True,
            timeout=120,
            env=clean_env(),
        )
        assert done.returncode == 3, (args, done.stderr)
        [said] = done.stderr.splitlines()
        assert said.startswith(f"error: cannot connect to {url}: "), said
        assert "Connection refused" in said
