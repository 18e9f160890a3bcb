"""The README's "A short tour of the CLI" runs as a user types it (issue 12): each command of
its bash block, read from README.md at test time, runs in bash with `milepost` on PATH, on
a fresh SQLite file (`MILEPOST_DATABASE_URL`) from the repo root, with the id of a real
run (`milepost run examples/hello_world.yaml --set name=Ada`, the tour's first line) in
place of the README's example id. Each exits as the README's exit-code table says (0: done,
the run COMPLETED), prints no traceback, and prints what its comment promises; a `--wait`
or `--follow` on the ended run returns at once.

Not run here (minutes, or data this checkout does not hold): `milepost conformance` (the
NoETL suite: `make test` runs it, tests/integration/test_conformance_runner.py the runner),
`milepost bench` (`make bench`, BENCHMARKS.md), `milepost verify`
(tests/e2e/test_verify.py). `playbook.yaml` is illustrative (the repo has none): that line
runs a small playbook of the test's own under that name.

The `--server` side of the tour's reads is covered elsewhere, each against a real
`milepost server` and `milepost worker`: `list`, `status` (and `--wait`), `describe` and
`events` (`--step`, `--type`, `--tail`, `--follow`) in tests/e2e/test_operator_reads.py,
`logs` (`--step`, `--follow`) in tests/acceptance/test_logs_server.py, `workers` in
tests/acceptance/test_workers_server.py, `doctor` in tests/e2e/test_doctor.py, `credential
set` in tests/acceptance/test_actions_server.py. The one combination none of them runs,
the tour's `events ... --step --type --tail --follow` (and `logs --step --follow`) in one
command, runs here against a cluster too."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.acceptance.harness import Cluster
from tests.e2e.test_readme_server import ROOT, user_env

README_ID = "402601968591175680"
# lines that cannot run here in seconds, and where they are covered
NOT_RUN = {
    "milepost conformance": "make test; tests/integration/test_conformance_runner.py",
    "milepost bench": "make bench (BENCHMARKS.md)",
    "milepost verify": "tests/e2e/test_verify.py",
}
AT_ONCE_S = 20.0  # a CLI start under a loaded 2-CPU machine, not a wait for anything
# the tour's `playbook.yaml`: a workload `--payload` is merged over
PLAYBOOK = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: tour, path: tests/tour}
    workload: {n: 1, label: kept}
    workflow:
      - step: start
        tool:
          kind: python
          input: {n: "{{ workload.n }}", label: "{{ workload.label }}"}
          code: "result = {'n': n, 'label': label}"
    """)
FAILS = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: tour_fails, path: tests/tour-fails}
    workflow:
      - step: start
        tool: {kind: shell, command: "exit 4"}
    """)


def tour_lines() -> list[str]:
    """The commands of the tour's bash block, as written (comment-only lines left out)."""
    section = (ROOT / "README.md").read_text().split("## A short tour of the CLI", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [
        line.strip()
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def command_of(line: str) -> str:
    """`milepost run`, `milepost status --wait`, ...: what the line is, for the test ids."""
    words = shlex.split(line, comments=True)
    flags = [w for w in words[2:] if w in ("--wait", "--follow", "--json")]
    return " ".join(words[:2] + flags[:1])


@dataclass
class Done:
    line: str
    code: int
    out: str
    err: str
    seconds: float


@dataclass
class Tour:
    tmp: Path
    env: dict[str, str] = field(repr=False)  # a failure shows no environment, no key
    run: Done
    """The tour's first line: `milepost run examples/hello_world.yaml --set name=Ada`."""
    xid: str
    failed: str
    """A FAILED run made before the tour, for `list --status FAILED` to show."""

    def bash(self, line: str, timeout: float = 120) -> Done:
        started = time.monotonic()
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Done(line, done.returncode, done.stdout, done.stderr, time.monotonic() - started)


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> Tour:
    tmp = tmp_path_factory.mktemp("tour")
    env = {**user_env(), "MILEPOST_DATABASE_URL": f"sqlite:///{tmp / 'tour.db'}"}
    key = subprocess.run(
        ["milepost", "secret-key"], env=env, capture_output=True, text=True, timeout=60
    )
    assert key.returncode == 0, key.stderr
    env["MILEPOST_SECRET_KEY"] = key.stdout.strip().splitlines()[-1]
    (tmp / "fails.yaml").write_text(FAILS)
    made = Tour(tmp, env, Done("", 0, "", "", 0), "", "")
    failing = made.bash(f"milepost run {tmp / 'fails.yaml'} --json")
    assert failing.code == 1, failing.err  # table: 1, the run ended FAILED
    made.failed = json.loads(failing.out)["execution_id"]
    [first] = [line for line in tour_lines() if "examples/hello_world.yaml" in line]
    made.run = made.bash(first)
    started = re.search(r"execution (\d+) started", made.run.out)
    assert made.run.code == 0 and started, (made.run.out, made.run.err)
    made.xid = started.group(1)
    return made


def as_typed(tour: Tour, line: str) -> str:
    """The line with the real run's id, and `playbook.yaml` (the repo has none) one of ours."""
    if "playbook.yaml" in line:
        assert not (ROOT / "playbook.yaml").exists()
        (tour.tmp / "playbook.yaml").write_text(PLAYBOOK)
        line = line.replace("playbook.yaml", shlex.quote(str(tour.tmp / "playbook.yaml")))
    return line.replace(README_ID, tour.xid)


def check_line(tour: Tour, line: str) -> Done:
    done = tour.run if "examples/hello_world.yaml" in line else tour.bash(as_typed(tour, line))
    # the README's table: 0 done; for run, resume, status --wait: the run COMPLETED
    assert done.code == 0, (done.line, done.out, done.err)
    assert "Traceback" not in done.out + done.err, done.err
    return done


def test_the_tour_is_the_one_this_file_runs() -> None:
    commands = [command_of(line) for line in tour_lines()]
    assert commands[0] == "milepost run"  # the run whose id the others name
    assert sum(README_ID in line for line in tour_lines()) == 7
    assert [c for c in commands if c.startswith(tuple(NOT_RUN))] == list(NOT_RUN)
    table = (ROOT / "README.md").read_text().split("**Exit codes**", 1)[1]
    assert "| 0 | done; for `run`, `resume`, `status --wait`" in table


@pytest.mark.parametrize(
    "line", [line for line in tour_lines() if not line.startswith(tuple(NOT_RUN))], ids=command_of
)
def test_each_tour_command_runs_as_written(tour: Tour, line: str) -> None:
    done = check_line(tour, line)
    out, xid = done.out, tour.xid
    words = shlex.split(line, comments=True)
    command = words[1]
    if "--wait" in words or "--follow" in words:  # the run has ended: nothing to wait for
        assert done.seconds < AT_ONCE_S, (line, done.seconds)
    if "examples/hello_world.yaml" in line:  # live progress, then each step's result
        assert f"execution {xid} COMPLETED" in out
        assert re.search(r"start\s+COMPLETED\s+\{\"greeting\": \"Hello, Ada!\"\}", out), out
        assert re.search(r"shout\s+COMPLETED\s+\{\"loud\": \"HELLO, ADA!\"", out), out
    elif "parallel_loop" in line:  # {execution_id, status, error, steps}
        data = json.loads(out)
        assert {"execution_id", "status", "error", "steps"} <= set(data)
        assert data["status"] == "COMPLETED" and data["error"] is None
        assert data["steps"]["total"]["result"] == {"count": 20, "sum_of_squares": 2870}
    elif "playbook.yaml" in line:  # the payload merged over the playbook's workload
        assert re.search(r"start\s+COMPLETED\s+\{\"n\": 5, \"label\": \"kept\"\}", out), out
    elif command == "validate":  # every file, each checked
        for path in sorted((ROOT / "examples").glob("*.yaml")):
            assert f"✓ examples/{path.name}" in out, (path.name, out)
    elif command == "list":  # id, playbook, status, start, end, duration: the FAILED one only
        row = next(row for row in out.splitlines() if tour.failed in row)
        assert "tests/tour-fails" in row and "FAILED" in row
        assert re.search(r"\d\d:\d\d:\d\d\.\d{3}\s.*\d\.\d{3}s", row), row  # end, duration
        assert xid not in out
    elif command == "status":  # status, steps
        assert f"execution {xid} examples/hello_world: COMPLETED" in out
        assert re.search(r"start\s.*COMPLETED", out) and re.search(r"shout\s.*COMPLETED", out)
    elif command == "describe":  # each step: attempts, times, worker, input
        assert f"execution {xid} examples/hello_world v1: COMPLETED" in out
        for step in ("start", "shout"):
            assert re.search(rf"{step}\s.*COMPLETED\s.*embedded:", out), (step, out)
        assert 'start: input {"name": "Ada"}' in out
    elif command == "events":  # the step's command events, at most the last 20
        kinds = [row.split()[3] for row in out.splitlines()]
        assert kinds == ["command.issued", "command.claimed", "command.completed"], out
        assert all(" shout " in row for row in out.splitlines())
    elif command == "logs":  # hello_world's steps print nothing: it says so (off stdout)
        assert out == "" and f"execution {xid} (COMPLETED) has printed nothing" in done.err
    elif command == "workers":  # the run has ended: its in-process workers left
        assert "no workers" in out
    elif command == "resume":  # an ended run: nothing to resume, exit as run did (0)
        assert re.search(
            rf"execution {xid} is COMPLETED \(ended [^)]+\); nothing to resume", out + done.err
        )
    elif command == "doctor":
        assert f"execution {xid} examples/hello_world: COMPLETED" in out
        assert "completed: the run completed" in out
    elif command == "credential":  # stored encrypted with MILEPOST_SECRET_KEY
        listed = tour.bash("milepost credential list --json")
        assert listed.code == 0, listed.err
        assert "pg" in [c["name"] for c in json.loads(listed.out)], listed.out
        for stored in tour.tmp.glob("tour.db*"):  # the file and its WAL
            assert b"127.0.0.1" not in stored.read_bytes(), stored
    else:
        pytest.fail(f"a tour line this test does not check: {line}")


def shape(events: str) -> list[list[str]]:
    """Each printed event's type, step and status (not its time, seq or ids)."""
    return [row.split()[3:6] for row in events.splitlines()]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("tour-cluster")
    with Cluster.running(f"sqlite:///{tmp / 'server.db'}", tmp, use_nats=False) as made:
        yield made


@pytest.mark.parametrize("command", ["events", "logs"])
def test_the_tours_combined_reads_run_against_a_server(
    cluster: Cluster, tour: Tour, command: str
) -> None:
    """`events --step --type --tail --follow` and `logs --step --follow` in one command, as
    the tour writes them, on a server's ended run: at once, the same as locally."""
    xid = cluster.run((ROOT / "examples" / "hello_world.yaml").read_text(), {"name": "Ada"})
    assert cluster.wait(xid)["status"] == "COMPLETED", cluster.diagnostics()
    [line] = [line for line in tour_lines() if line.startswith(f"milepost {command} ")]
    env = {**user_env(), "MILEPOST_TOKEN": cluster.admin_token}
    started = time.monotonic()
    # the line without its comment: `--server` after it would be commented out
    words = shlex.split(line.replace(README_ID, xid), comments=True)
    typed = shlex.join([*words, "--server", cluster.url])
    done = subprocess.run(
        ["bash", "-c", typed], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert time.monotonic() - started < AT_ONCE_S
    assert "Traceback" not in done.stdout + done.stderr
    local = check_line(tour, line)
    if command == "events":
        assert shape(done.stdout) == shape(local.out), (done.stdout, local.out)
        assert len(shape(done.stdout)) == 3
    else:
        assert done.stdout == local.out == ""
        assert done.stderr == local.err.replace(tour.xid, xid)
