"""An operator acting on a server's runs with the CLI (`--server`), real `milepost server`
and `milepost worker` processes (issue 12): a restart does not call the reused step's tool
again (its side effects are counted), a retry runs the waiting attempt now, a skip stops
the step's running python process and the run goes on with the result; a revoked token
is refused; credentials are managed against the server."""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from milepost.core import events as ev
from tests.acceptance.harness import MILEPOST, Cluster, database
from tests.acceptance.test_cancel_server import events, gone
from tests.holding_step import HOLD, started
from tests.shared import wait_for

pytestmark = pytest.mark.slow

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\n"
# each step appends a line to a file of its own: how many times its tool ran
FLOW = HEADER + textwrap.dedent("""\
    metadata: {name: ops, path: acceptance/ops}
    workflow:
      - step: start
        tool:
          kind: python
          input: {dir: "{{ workload.dir }}"}
          code: |
            open(dir + "/start", "a").write("x\\n")
            result = {"token": 7}
        next: flaky
      - step: flaky
        tool:
          kind: python
          input: {dir: "{{ workload.dir }}", token: "{{ start.token }}"}
          code: |
            import os
            open(dir + "/flaky", "a").write("x\\n")
            if not os.path.exists(dir + "/fixed"):
                raise RuntimeError("not yet")
            result = {"got": token}
        spec: SPEC
        next: end
      - step: end
        tool: {kind: noop}
    """)
HOLDING = (
    HEADER
    + "metadata: {name: hold, path: acceptance/hold}\nworkflow:\n"
    + '  - step: hold\n    tool:\n      kind: python\n      input: {out: "{{ workload.out }}"}\n'
    + "      code: |\n"
    + textwrap.indent(HOLD, " " * 8)
    + '    set: {ctx.got: "{{ hold }}"}\n    next: after\n'
    + '  - step: after\n    tool: {kind: python, input: {got: "{{ ctx.got }}"}, code: "result = got"}\n'
)


@pytest.fixture(params=["sqlite"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def cluster(db_url: str, tmp_path: Path) -> Iterator[Cluster]:
    with Cluster.running(db_url, tmp_path, lease_seconds=3.0) as cluster:  # heartbeats every second
        yield cluster


def operator(cluster: Cluster) -> str:
    out = subprocess.run(
        [
            MILEPOST,
            "token",
            "create",
            "--role",
            "operator",
            "--user",
            "olga",
            "--db",
            cluster.db_url,
        ],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def cli(cluster: Cluster, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "MILEPOST_SERVER_URL": cluster.url, "MILEPOST_TOKEN": token}
    return subprocess.run([MILEPOST, *args], env=env, capture_output=True, text=True, timeout=60)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
def test_restart_reuses_the_results_before_the_failed_step_without_calling_its_tool(
    cluster: Cluster, tmp_path: Path
) -> None:
    xid = cluster.run(FLOW.replace("SPEC", "{}"), {"dir": str(tmp_path)})
    assert cluster.wait(xid)["status"] == "FAILED"
    assert (lines(tmp_path / "start"), lines(tmp_path / "flaky")) == (1, 1)
    (tmp_path / "fixed").touch()
    token = operator(cluster)
    done = cli(cluster, token, "restart", xid, "--json")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["restarted_from"] == xid and reply["reused"] == ["start"]
    new = reply["execution_id"]
    status = cluster.wait(new)
    assert status["status"] == "COMPLETED", cluster.diagnostics()
    assert status["steps"]["flaky"]["result"] == {"got": 7}  # the reused result reached it
    assert (lines(tmp_path / "start"), lines(tmp_path / "flaky")) == (1, 2)  # start not again
    log = events(cluster.db_url, new)
    started = next(e for e in log if e.event_type == ev.EXECUTION_STARTED)
    assert started.payload["started_by"] == "user:olga"
    assert [e.step for e in log if e.event_type == ev.STEP_REUSED] == ["start"]
    assert cluster.client.restarts(xid)["restarts"] == [new]
    assert cluster.client.status(xid)["status"] == "FAILED"  # the old run never moves


def test_retry_runs_the_waiting_attempt_now(cluster: Cluster, tmp_path: Path) -> None:
    spec = "{retry: {max_attempts: 3, delay: 600, retry_on: [exception, error]}}"
    xid = cluster.run(FLOW.replace("SPEC", spec), {"dir": str(tmp_path)})
    wait_for(
        lambda: any(
            e.event_type == ev.COMMAND_RETRY_SCHEDULED for e in events(cluster.db_url, xid)
        ),
        "the retry timer",
        timeout=30,
    )
    (tmp_path / "fixed").touch()
    done = cli(cluster, operator(cluster), "retry", xid, "flaky", "--reason", "fixed it")
    assert done.returncode == 0, done.stderr
    assert "retried by user:olga" in done.stdout and "attempt 2 issued" in done.stdout
    assert cluster.wait(xid)["status"] == "COMPLETED", cluster.diagnostics()
    assert lines(tmp_path / "flaky") == 2
    [request] = [e for e in events(cluster.db_url, xid) if e.event_type == ev.STEP_RETRY_REQUESTED]
    assert (request.payload["actor"], request.payload["reason"]) == ("user:olga", "fixed it")


def test_skip_stops_the_running_step_and_the_run_goes_on_with_the_result(
    cluster: Cluster, tmp_path: Path
) -> None:
    out = tmp_path / "pids"
    xid = cluster.run(HOLDING, {"out": str(out)})
    [pid] = started(out)
    done = cli(cluster, operator(cluster), "skip", xid, "hold", "--result", '{"by": "hand"}')
    assert done.returncode == 0, done.stderr
    status = cluster.wait(xid, timeout=30)
    assert status["status"] == "COMPLETED", (status, cluster.diagnostics())
    assert status["steps"]["after"]["result"] == {"by": "hand"}
    # the worker's next heartbeat is refused: it stops the attempt's process
    wait_for(lambda: gone(pid), f"python process {pid} to be stopped", timeout=20)


def test_a_viewer_may_not_act_and_a_revoked_token_is_refused(
    cluster: Cluster, tmp_path: Path
) -> None:
    xid = cluster.run(FLOW.replace("SPEC", "{}"), {"dir": str(tmp_path)})
    assert cluster.wait(xid)["status"] == "FAILED"
    viewer = cluster.token("viewer")
    refused = cli(cluster, viewer, "rerun", xid)
    assert refused.returncode == 2 and "role 'viewer' may not" in refused.stderr
    assert "Traceback" not in refused.stderr
    token = operator(cluster)
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{cluster.url}/api/executions/{xid}", headers=headers).status_code == 200
    listed = subprocess.run(
        [MILEPOST, "token", "list", "--json", "--db", cluster.db_url],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    [mine] = [t for t in json.loads(listed.stdout) if t["user"] == "olga"]
    assert mine["role"] == "operator" and token not in listed.stdout  # never the token
    revoked = subprocess.run(
        [MILEPOST, "token", "revoke", mine["id"], "--db", cluster.db_url],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert revoked.returncode == 0, revoked.stderr
    # the server's token cache may hold it for a few seconds more
    wait_for(
        lambda: (
            httpx.get(f"{cluster.url}/api/executions/{xid}", headers=headers).status_code == 401
        ),
        "the token to be refused",
        timeout=20,
    )


def test_credentials_are_managed_on_the_server(cluster: Cluster) -> None:
    token = cluster.admin_token
    made = cli(
        cluster,
        token,
        "credential",
        "set",
        "pg_main",
        "--type",
        "postgres",
        "--data",
        '{"host": "db", "password": "s3cret"}',
    )
    assert made.returncode == 0, made.stderr
    listed = cli(cluster, token, "credential", "list", "--json")
    assert [(c["name"], c["type"]) for c in json.loads(listed.stdout)] == [("pg_main", "postgres")]
    assert "s3cret" not in listed.stdout
    assert cluster.client.credential("pg_main") == {
        "host": "db",
        "password": "s3cret",
        "type": "postgres",
    }
    assert cli(cluster, token, "credential", "delete", "pg_main").returncode == 0
    missing = cli(cluster, token, "credential", "delete", "pg_main")
    assert missing.returncode == 2 and "no credential 'pg_main'" in missing.stderr
