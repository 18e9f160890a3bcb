"""Attempt logs through `milepost server` and a real worker process, on SQLite and
PostgreSQL: what python and shell steps print travels with the worker's reports, is
stored redacted and capped by the worker's `MILEPOST_LOG_CAP_BYTES`, and is read through
`GET /api/executions/{id}/logs` (a cursor, a step, 404) and `milepost logs --server`
(with `--follow` until the run ends, and Ctrl-C leaving the run going)."""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.acceptance.harness import MILEPOST, Cluster, database

pytestmark = pytest.mark.slow

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: logs, path: tests/logs}\n"

PRINTS = HEADER + textwrap.dedent("""
workload:
  password: hunter2-secret-value
workflow:
  - step: start
    tool: {kind: shell, command: "echo from-shell; echo shell-warning >&2"}
    next: [{step: compute}]
  - step: compute
    tool:
      kind: python
      input: {secret: "{{ workload.password }}"}
      code: |
        print("using", secret)
        print("x" * 5000)
        raise RuntimeError("gave up")
""")

WAITS = HEADER.replace("tests/logs", "tests/logs-wait") + textwrap.dedent("""
workflow:
  - step: start
    tool: {kind: shell, command: "echo ready"}
    next: [{step: wait}]
  - step: wait
    tool:
      kind: python
      code: |
        import os, time
        print("waiting for the go")
        deadline = time.monotonic() + 60
        while not os.path.exists("GO") and time.monotonic() < deadline:
            time.sleep(0.05)
        print("went")
        result = 1
""")


@pytest.fixture(params=["sqlite", "postgres"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    with database(request.param, tmp_path) as url, Cluster(url, tmp_path) as made:
        made.env["MILEPOST_LOG_CAP_BYTES"] = "1024"  # the worker's cap
        made.start_server()
        made.start_worker()
        yield made


def logs_cli(cluster: Cluster, *args: str) -> list[str]:
    return [MILEPOST, "logs", *args, "--server", cluster.url]


def env(cluster: Cluster, token: str) -> dict[str, str]:
    return {**cluster.env, "MILEPOST_TOKEN": token}


def check_reads(api: httpx.Client, xid: str) -> None:
    body = api.get(f"/api/executions/{xid}/logs").json()
    assert body["status"] == "FAILED"
    entries = body["entries"]
    assert [(e["step"], e["stream"]) for e in entries] == [
        ("start", "stdout"),
        ("start", "stderr"),
        ("compute", "stdout"),
        ("compute", "traceback"),
    ]
    assert entries[0]["text"] == "from-shell\n" and entries[1]["text"] == "shell-warning\n"
    out = entries[2]
    assert out["text"].startswith("using ***\n") and "hunter2" not in json.dumps(entries)
    # capped by the worker's setting, counted on what was printed (redacted after)
    seam = 128  # dropped beside the cut (`core.logs.SEAM`, a quarter of a half)
    assert out["cut"] == len("using hunter2-secret-value\n") + 5001 - 1024 + 2 * seam
    assert f"[... {out['cut']} bytes cut ...]" in out["text"]
    assert 'File "<step compute>", line 3, in <module>' in entries[3]["text"]
    # a cursor resumes after the last entry read; a step filters
    rest = api.get(f"/api/executions/{xid}/logs", params={"after": entries[1]["cursor"]}).json()
    assert rest["entries"] == entries[2:] and rest["next"] == entries[3]["cursor"]
    only = api.get(f"/api/executions/{xid}/logs", params={"step": "start"}).json()
    assert only["entries"] == entries[:2]
    missing = api.get("/api/executions/12345/logs")
    assert missing.status_code == 404 and "12345" in missing.text


def test_a_servers_worker_reports_what_its_steps_print(cluster: Cluster) -> None:
    xid = cluster.run(PRINTS)
    status = cluster.wait(xid)
    assert status["status"] == "FAILED"
    assert (status["error"]["line"], status["error"]["code_line"]) == (
        3,
        'raise RuntimeError("gave up")',
    )
    reader = cluster.token("viewer")
    with httpx.Client(base_url=cluster.url, headers={"Authorization": f"Bearer {reader}"}) as api:
        check_reads(api, xid)
    # what python printed is in no event (a shell step's output is its result too)
    assert "using" not in json.dumps(cluster.client.events(xid))
    shown = subprocess.run(
        logs_cli(cluster, xid, "--step", "compute"),
        env=env(cluster, reader),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "==> compute (attempt 1) stdout <==\nusing ***\n" in shown.stdout
    assert "RuntimeError: gave up" in shown.stdout and "from-shell" not in shown.stdout


def test_follow_prints_until_the_run_ends_and_ctrl_c_leaves_it_running(
    cluster: Cluster, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    reader = cluster.token("viewer")
    xid = cluster.run(WAITS.replace('"GO"', repr(str(go))))
    # Ctrl-C while following: exit 130, the run goes on
    first = subprocess.Popen(
        logs_cli(cluster, xid, "--follow"),
        env=env(cluster, reader),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stdout is not None
    # the first step's output: the follower is past its first read
    assert first.stdout.readline() == "==> start (attempt 1) stdout <==\n"
    first.send_signal(signal.SIGINT)
    out, err = first.communicate(timeout=30)
    assert first.returncode == 130, err
    assert f"stopped following its logs; execution {xid} goes on" in err
    assert f"Follow it: milepost logs {xid} --follow --server {cluster.url}" in err
    assert cluster.client.status(xid)["status"] == "RUNNING"
    # a follower started now ends by itself when the run does, having printed it all
    follower = subprocess.Popen(
        logs_cli(cluster, xid, "-f", "--json"),
        env=env(cluster, reader),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    go.touch()
    out, err = follower.communicate(timeout=60)
    assert follower.returncode == 0, err
    entries = [json.loads(line) for line in out.splitlines()]
    assert [(e["step"], e["text"]) for e in entries] == [
        ("start", "ready\n"),
        ("wait", "waiting for the go\nwent\n"),
    ]
    assert cluster.wait(xid)["status"] == "COMPLETED"
