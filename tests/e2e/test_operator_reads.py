"""The operator's reads through the `milepost` command, as a user types them: `list`,
`describe`, `events`, `status --wait`, the output formats and the exit codes, each on the
local database and against a real server with a real worker (`--server`)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from milepost.conformance.mock_api import MockServer
from tests.acceptance.harness import Cluster
from tests.shared import clean_env, wait_for

MILEPOST = str(Path(sys.executable).with_name("milepost"))

# a python step whose result holds a NaN and a secret of the workload, then a shell step
# that fails with something on stderr
FAILING = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: reads, path: tests/reads-with-a-rather-long-catalog-path-name}
    workload: {password: hunter2-secret, n: 2}
    workflow:
      - step: start
        tool:
          kind: python
          input: {n: "{{ workload.n }}", pw: "{{ workload.password }}"}
          code: "result = {'n': n, 'x': float('nan')}"
        next: sh
      - step: sh
        tool: {kind: shell, command: "echo out; echo bad things >&2; exit 3"}
    """)
SLOW = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: slow, path: tests/slow}
    workload: {gate: GATE}
    workflow:
      - step: hold
        tool:
          kind: python
          input: {gate: "{{ workload.gate }}"}
          code: |
            import os, time
            deadline = time.monotonic() + 120
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.02)
            result = 'opened'
    """)


@dataclass
class Place:
    """Where the runs are: `args` name it on every command (`--db` or `--server`)."""

    name: str
    args: list[str]
    env: dict[str, str]
    start: Callable[[str, Path], str]
    """(playbook text, tmp dir) -> the id of a run started there, not waited for."""

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [MILEPOST, *args, *self.args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
        )

    def json(self, *args: str) -> Any:
        done = self.cli(*args, "--output", "json")
        assert done.stdout.strip(), done.stderr
        return json.loads(done.stdout)

    def finished(self, text: str, tmp: Path) -> str:
        xid = self.start(text, tmp)
        wait_for(
            lambda: self.json("status", xid)["status"] in ("COMPLETED", "FAILED"),
            f"run {xid} to end",
            timeout=90,
        )
        return xid


def _env() -> dict[str, str]:
    return clean_env()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("reads-cluster")
    with Cluster.running(f"sqlite:///{tmp / 'server.db'}", tmp, use_nats=False) as made:
        yield made


@pytest.fixture(params=["local", "server"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    if request.param == "local":
        db = tmp_path / "m.db"

        def run_local(text: str, tmp: Path) -> str:
            pb = tmp / f"pb-{time.monotonic_ns()}.yaml"
            pb.write_text(text)
            known = set(_ids(db))
            proc = subprocess.Popen(
                [MILEPOST, "run", str(pb), "--json", "--db", str(db)],
                env=_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            request.addfinalizer(lambda: (proc.kill(), proc.communicate()))
            return str(
                wait_for(lambda: _new(db, proc, known), "the local run to start", timeout=60)
            )

        return Place("local", ["--db", str(db)], _env(), run_local)
    made: Cluster = request.getfixturevalue("cluster")
    env = {**_env(), "MILEPOST_TOKEN": made.admin_token}
    return Place("server", ["--server", made.url], env, lambda text, _tmp: made.run(text))


def _ids(db: Path) -> list[str]:
    if not db.exists():
        return []
    done = subprocess.run(
        [MILEPOST, "list", "-q", "--db", str(db)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.split()


def _new(db: Path, proc: subprocess.Popen[str], known: set[str]) -> str | None:
    """The id of the run `proc` started, once it is in the database."""
    assert proc.poll() is None or proc.returncode in (0, 1), proc.communicate()
    return next((xid for xid in _ids(db) if xid not in known), None)


def test_list_filters_and_shows_end_and_duration_in_full_when_piped(
    place: Place, tmp_path: Path
) -> None:
    xid = place.finished(FAILING, tmp_path)
    [item] = [i for i in place.json("list", "--since", "1h") if i["execution_id"] == xid]
    assert item["status"] == "FAILED" and item["ended_at"] and item["duration_s"] >= 0
    assert item["path"] == "tests/reads-with-a-rather-long-catalog-path-name"
    assert xid in [i["execution_id"] for i in place.json("list", "--status", "failed")]
    assert xid not in [i["execution_id"] for i in place.json("list", "--status", "COMPLETED")]
    assert xid not in [i["execution_id"] for i in place.json("list", "--playbook", "tests/other")]
    future = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 3600))
    assert place.json("list", "--since", future) == []
    table = place.cli("list")  # piped: nothing cut to 80 columns
    row = next(line for line in table.stdout.splitlines() if xid in line)
    assert "tests/reads-with-a-rather-long-catalog-path-name" in row and "FAILED" in row
    assert len(row) > 80 and "…" not in row
    assert place.cli("list", "-q").stdout.split()[0] == xid
    bad = place.cli("list", "--since", "[yesterday]")  # brackets are no markup: shown as typed
    assert bad.returncode == 2 and "--since '[yesterday]'" in bad.stderr


def test_describe_shows_attempts_workers_times_input_and_the_failure_output(
    place: Place, tmp_path: Path
) -> None:
    xid = place.finished(FAILING, tmp_path)
    done = place.cli("describe", xid, "--output", "json")
    assert done.returncode == 0, done.stderr
    assert "NaN" not in done.stdout
    data = json.loads(done.stdout)  # valid JSON: the NaN of the result is null
    assert data["status"] == "FAILED" and data["started_at"] and data["duration_s"] >= 0
    start, sh = data["steps"]["start"], data["steps"]["sh"]
    assert start["result"] == {"n": 2, "x": None}
    assert start["input"] == {"n": 2, "pw": "***"}  # redacted
    assert "hunter2-secret" not in done.stdout
    [attempt] = start["attempts"]
    worker = "embedded:" if place.name == "local" else "worker-1"
    assert attempt["worker"].startswith(worker) and start["worker"] == attempt["worker"]
    assert attempt["status"] == "COMPLETED" and attempt["started_at"] and attempt["ended_at"]
    assert sh["status"] == "FAILED" and sh["error"]["message"] == "shell command exited with code 3"
    assert sh["result"]["stderr"] == "bad things\n"  # not null: what the tool returned
    assert sh["attempts_total"] == 1 and sh["attempts"][0]["output"]["exit_code"] == 3
    shown = place.cli("describe", xid)
    assert shown.returncode == 0, shown.stderr
    for text in ("FAILED", "stderr:", "bad things", '"pw": "***"', attempt["worker"]):
        assert text in shown.stdout, text
    as_yaml = yaml.safe_load(place.cli("describe", xid, "-o", "yaml").stdout)
    assert as_yaml["steps"]["sh"]["result"]["exit_code"] == 3
    missing = place.cli("describe", "424242")
    assert missing.returncode == 2 and "no execution 424242" in missing.stderr


HTTP_FAILS = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: http-fails, path: tests/http-fails}
    workflow:
      - step: start
        tool: {kind: http, method: GET, url: "API/api/v1/errors?error_type=404"}
    """)


@pytest.fixture(scope="module")
def mock_api() -> Iterator[MockServer]:
    with MockServer() as api:
        yield api


def test_describe_of_a_failed_http_step_shows_its_response_status_and_body(
    place: Place, tmp_path: Path, mock_api: MockServer
) -> None:
    xid = place.finished(HTTP_FAILS.replace("API", mock_api.url), tmp_path)
    data = place.json("describe", xid)
    start = data["steps"]["start"]
    assert data["status"] == "FAILED" and start["status"] == "FAILED", data
    assert start["result"]["status_code"] == 404  # what the tool returned, not null
    assert start["result"]["body"] == {"detail": "Not Found - resource does not exist"}
    shown = place.cli("describe", xid)
    assert shown.returncode == 0, shown.stderr
    lines = [line.strip() for line in shown.stdout.splitlines()]
    assert "http status: 404" in lines and "body:" in lines, shown.stdout
    body = lines[lines.index("body:") + 1]
    assert json.loads(body) == {"detail": "Not Found - resource does not exist"}, shown.stdout


def _no_constant(name: str) -> None:
    raise AssertionError(f"bare {name} in the JSON output")


def test_events_by_step_and_type_and_the_last_few(place: Place, tmp_path: Path) -> None:
    xid = place.finished(FAILING, tmp_path)
    every = place.json("events", xid)
    assert every[0]["event_type"] == "execution.started"
    assert every[-1]["event_type"] == "execution.failed"
    commands = place.json("events", xid, "--step", "sh", "--type", "command")
    assert [e["event_type"] for e in commands] == [
        "command.issued",
        "command.claimed",
        "command.failed",
    ]
    both = place.json("events", xid, "--type", "step.enter,execution.failed")
    assert [e["event_type"] for e in both] == ["step.enter", "step.enter", "execution.failed"]
    assert place.json("events", xid, "--tail", "2") == every[-2:]
    as_lines = place.cli("events", xid, "--json").stdout.splitlines()  # --json as before
    # strict JSON: Python's json.loads takes a bare NaN or Infinity, a browser's does not
    assert [json.loads(line, parse_constant=_no_constant) for line in as_lines] == every
    lines = place.cli("events", xid, "--type", "command.failed").stdout.splitlines()
    assert len(lines) == 1 and "command.failed" in lines[0] and "sh" in lines[0]
    assert (
        yaml.safe_load(place.cli("events", xid, "-o", "yaml", "--tail", "1").stdout) == every[-1:]
    )


def test_status_wait_and_events_follow_a_run_to_its_end(place: Place, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    xid = place.start(SLOW.replace("GATE", str(gate)), tmp_path)
    waiting = subprocess.Popen(
        [MILEPOST, "status", xid, "--wait", "--json", *place.args],
        env=place.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    following = subprocess.Popen(
        [MILEPOST, "events", xid, "--follow", "--json", *place.args],
        env=place.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: place.json("status", xid)["steps"].get("hold", {}).get("status") == "RUNNING",
            "the step to run",
            timeout=60,
        )
        assert waiting.poll() is None and following.poll() is None  # both still at it
        gate.touch()
        out, err = waiting.communicate(timeout=90)
        followed, ferr = following.communicate(timeout=90)
    finally:
        for proc in (waiting, following):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert waiting.returncode == 0, err
    assert json.loads(out)["status"] == "COMPLETED"
    assert following.returncode == 0, ferr
    types = [json.loads(line)["event_type"] for line in followed.splitlines()]  # JSON lines
    assert types[0] == "execution.started" and types[-1] == "execution.completed"
    assert types == [e["event_type"] for e in place.json("events", xid)]
    failed = place.finished(FAILING, tmp_path)
    ended = place.cli("status", failed, "--wait")
    assert ended.returncode == 1 and "FAILED" in ended.stdout


def test_version_help_and_usage_errors() -> None:
    version = subprocess.run([MILEPOST, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("milepost ")
    # the installed script, as a user runs it (tests/unit/test_cli_help.py: every command's
    # every help text, in process)
    for command in ("list", "events", "status", "run", "describe", "retry", "restart", "logs"):
        shown = subprocess.run(
            [MILEPOST, command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**_env(), "COLUMNS": "200"},
        )
        assert shown.returncode == 0 and "<bool>" not in shown.stdout, command
        assert "[env: MILEPOST_DATABASE_URL" in shown.stdout or command == "run", command
    listed = subprocess.run(
        [MILEPOST, "list", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_env(), "COLUMNS": "200"},
    )
    assert "[default: 50]" in listed.stdout
    restart = subprocess.run(
        [MILEPOST, "restart", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_env(), "COLUMNS": "200"},
    )
    assert "[default: the failed step" in restart.stdout  # rich markup would eat it
    bad = subprocess.run(
        [MILEPOST, "list", "--output", "xml"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2


def test_a_server_that_cannot_be_reached_exits_3() -> None:
    proc = subprocess.run(
        [MILEPOST, "list", "--server", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert proc.returncode == 3 and "Connection refused" in proc.stderr
    assert "Traceback" not in proc.stderr
