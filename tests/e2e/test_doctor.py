"""`milepost doctor ID` end to end, as an operator runs it: on the local database while
`milepost run` drives the run in another process (and after it was killed), and with
`--server` against `milepost server` + `milepost worker` processes (and `--db` on that
server's database). One run holds every blocking reason at once, each branch of an
inclusive fan-out stuck on its own; failed runs name their first error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.harness import Cluster, database
from tests.shared import clean_env, wait_for

pytestmark = pytest.mark.slow

MILEPOST = str(Path(sys.executable).with_name("milepost"))
WAIT = 60.0
HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: stuck, path: e2e/stuck}\n"
# every branch waits for its own reason: a person, a file (DIR/go), a timer, a pool
STUCK = """
workflow:
  - step: start
    tool: {kind: python, code: "open('DIR/started', 'w').write('x'); result = 1"}
    next:
      spec: {mode: inclusive}
      arcs: [{step: gate}, {step: each}, {step: flaky}, {step: slow}, {step: train}]
  - step: gate
    tool: {kind: noop}
    spec:
      approval: {approvers: [user:alice, role:finance], quorum: 1, expires_in: 1h}
  - step: each
    loop: {in: [1, 2, 3], iterator: n, mode: sequential}
    tool: &wait
      kind: python
      code: |
        import os, time
        while not os.path.exists("DIR/go"):
            time.sleep(0.05)
        result = 1
  - step: flaky
    spec: {retry: {max_attempts: 3, backoff: fixed, delay: 3600, retry_on: [exception]}}
    tool: {kind: python, code: "raise ValueError('flaky')"}
  - step: slow
    tool: *wait
  - step: train
    spec: {pool: gpu}
    tool: {kind: noop}
"""
FAILING = {
    "python": (
        """
        workflow:
          - step: divide
            tool:
              kind: python
              code: |
                a = 1
                b = 0
                result = a / b
        """,
        "failed: step 'divide' (python) failed: ZeroDivisionError: division by zero at "
        "line 3: result = a / b",
    ),
    "template": (
        """
        workflow:
          - step: greet
            tool: {kind: python, input: {v: "{{ nope.deeper }}"}, code: "result = v"}
        """,
        "failed: step 'greet' (python) failed: template error in input 'v': undefined "
        "name 'nope' in '{{ nope.deeper }}'",
    ),
}


def env(**extra: str) -> dict[str, str]:
    return clean_env(**{"MILEPOST_USER": "runner", "MILEPOST_PYTHON_WORKERS": "4", **extra})


def write(tmp: Path, body: str, name: str) -> Path:
    path = tmp / name
    path.write_text(
        HEADER.replace("stuck", name.removesuffix(".yaml"))
        + textwrap.dedent(body).replace("DIR", str(tmp))
    )
    return path


def doctor(
    xid: str, *where: str, environ: dict[str, str] | None = None, json_out: bool = True
) -> Any:
    done = subprocess.run(
        [MILEPOST, "doctor", xid, *where, *(["-o", "json"] if json_out else [])],
        env=environ or env(),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return json.loads(done.stdout) if json_out else done.stdout


def by_kind(found: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for finding in found["findings"]:
        out.setdefault(finding["kind"], []).append(finding)
    return out


def stuck(found: dict[str, Any], *kinds: str) -> bool:
    seen = by_kind(found)
    claimed = {f["step"] for f in seen.get("claimed", [])}
    return set(kinds) <= set(seen) and {"slow", "each"} <= claimed


def check_the_branches(found: dict[str, Any]) -> None:
    """What both modes say of the stuck run, whoever runs its commands."""
    seen = by_kind(found)
    assert found["status"] == "RUNNING"
    (gate,) = seen["awaiting_approval"]
    assert gate["step"] == "gate" and gate["fields"]["approvers"] == ["user:alice", "role:finance"]
    assert "who may decide: user:alice, role:finance" in gate["message"]
    (retry,) = seen["retry_pending"]
    assert retry["step"] == "flaky" and retry["fields"]["attempt"] == 2
    assert retry["message"].endswith("attempt 2 of 3, after: ValueError: flaky")
    (loop,) = seen["loop_waiting"]
    assert loop["step"] == "each" and loop["message"].startswith(
        "loop step 'each' waits for 3 of 3 iteration(s): 0 done, 1 in flight"
    )
    for claimed in seen["claimed"]:
        assert claimed["fields"]["worker_id"] and claimed["fields"]["lease_expires_at"]
        assert (
            " is claimed by " in claimed["message"] and "its lease ends in " in claimed["message"]
        )
    assert {f["step"] for f in seen["claimed"]} == {"slow", "each"}


# -- the local database ----------------------------------------------------------------------


@pytest.fixture
def running(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """`milepost run` of the stuck playbook, in its own process group (its python workers
    go down with it)."""
    with (tmp_path / "run.out").open("w") as out:
        proc = subprocess.Popen(
            [
                MILEPOST,
                "run",
                str(write(tmp_path, STUCK, "stuck.yaml")),
                "--db",
                str(tmp_path / "m.db"),
            ],
            env=env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=WAIT)
        (tmp_path / "go").write_text("")  # a python worker left behind finishes


def _only_run(db: Path) -> str:
    from milepost.store.sqlite import SQLiteStore

    if not (db.parent / "started").exists():  # the database is migrated by then
        return ""
    store = SQLiteStore(db)
    try:
        rows = store.list_executions()
    finally:
        store.close()
    return str(rows[0].execution_id) if rows else ""


def test_doctor_on_the_local_database_names_each_reason_and_a_stopped_driver(
    tmp_path: Path, running: subprocess.Popen[str]
) -> None:
    db = tmp_path / "m.db"
    xid = wait_for(
        lambda: running.poll() is None and _only_run(db), "the run to start", timeout=WAIT
    )
    found = wait_for(
        lambda: (
            lambda f: f if stuck(f, "awaiting_approval", "retry_pending", "loop_waiting") else None
        )(doctor(xid, "--db", str(db))),
        "every branch to be stuck",
        timeout=WAIT,
    )
    check_the_branches(found)
    # `milepost run`'s in-process workers serve every pool: the gpu step ran
    assert "no_live_worker" not in by_kind(found) and "no_driver" not in by_kind(found)
    text = doctor(xid, "--db", str(db), json_out=False).splitlines()
    assert text[0] == f"execution {xid} e2e/stuck: RUNNING"
    assert len(text) == 1 + len(found["findings"])  # one finding per line
    assert any(
        line.startswith("awaiting_approval: step 'gate' waits for approval") for line in text
    )

    os.killpg(running.pid, signal.SIGKILL)  # the machine dies: nothing drives the run
    running.wait(timeout=WAIT)
    first = doctor(xid, "--db", str(db))["findings"][0]
    assert first["kind"] == "no_driver"
    assert first["message"].endswith(f"continue it with `milepost resume {xid}`")


@pytest.mark.parametrize("case", sorted(FAILING))
def test_doctor_names_the_first_error_of_a_failed_local_run(tmp_path: Path, case: str) -> None:
    body, line = FAILING[case]
    done = subprocess.run(
        [
            MILEPOST,
            "run",
            str(write(tmp_path, body, f"{case}.yaml")),
            "--json",
            "--db",
            str(tmp_path / "m.db"),
        ],
        env=env(),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 1, done.stderr
    xid = json.loads(done.stdout)["execution_id"]
    text = doctor(xid, "--db", str(tmp_path / "m.db"), json_out=False)
    assert text.splitlines() == [f"execution {xid} e2e/{case}: FAILED", line]


# -- a server and its workers ----------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with database("sqlite", tmp_path) as url:
        c = Cluster(url, tmp_path)
        try:
            c.start_server()
            c.start_worker(concurrency=8, python_workers=4)  # the default pool only
            yield c
        finally:
            (tmp_path / "go").write_text("")
            c.close()


def test_doctor_with_a_server_names_each_reason_and_the_pool_without_a_worker(
    cluster: Cluster, tmp_path: Path
) -> None:
    admin = env(MILEPOST_TOKEN=cluster.admin_token)
    xid = cluster.run(textwrap.dedent(HEADER + STUCK).replace("DIR", str(tmp_path)))
    server = ("--server", cluster.url)
    found = wait_for(
        lambda: (
            lambda f: (
                f
                if stuck(f, "awaiting_approval", "retry_pending", "loop_waiting", "no_live_worker")
                else None
            )
        )(doctor(xid, *server, environ=admin)),
        "every branch to be stuck",
        timeout=WAIT,
    )
    check_the_branches(found)
    assert found["findings"][0] == {
        "kind": "no_live_worker",
        "step": "train",
        "fields": {"pool": "gpu", "commands": 1, "steps": ["train"]},
        "message": "1 command(s) of step train wait in pool gpu, which no live worker serves: "
        "start `milepost worker --pool gpu`",
    }
    assert {f["fields"]["worker_id"] for f in by_kind(found)["claimed"]} == {"worker-1"}
    # the same database read without the server: the same reasons
    local = doctor(xid, "--db", cluster.db_url)
    assert [f["kind"] for f in local["findings"]] == [f["kind"] for f in found["findings"]]
    text = doctor(xid, *server, environ=admin, json_out=False)
    assert "no_live_worker: 1 command(s) of step train wait in pool gpu" in text.splitlines()[1]

    for case, (body, line) in sorted(FAILING.items()):
        failed = cluster.run(HEADER.replace("stuck", case) + textwrap.dedent(body))
        assert cluster.wait(failed)["status"] == "FAILED"
        text = doctor(failed, *server, environ=admin, json_out=False)
        assert text.splitlines() == [f"execution {failed} e2e/{case}: FAILED", line]
