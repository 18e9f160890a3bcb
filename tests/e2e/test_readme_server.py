"""The README's server section works as written (issue 12): its commands run as a user
types them in bash, with `milepost` on PATH; then what a user meets on the way there: a
local command on `postgresql://`, `db upgrade` of a database that does not exist,
`register` of a bad file, and `execute --wait` stopped by Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.harness import (
    PG_ADMIN_URL,
    Cluster,
    _pg_connect,
    free_port,
    pg_available,
    tail,
)
from tests.e2e.test_operator_reads import SLOW
from tests.shared import IN_CI, clean_env, require_nats, wait_for

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MILEPOST = str(BIN / "milepost")


def server_block() -> str:
    """The bash block of the README's server section, up to the conformance suite (that
    one has its own tests, and needs the shared data)."""
    section = (ROOT / "README.md").read_text().split("## On many machines", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return "\n".join(line for line in block.splitlines() if "milepost conformance" not in line)


@pytest.fixture
def pg_name() -> Iterator[str]:
    """A database name nobody uses; dropped afterwards if it was made."""
    if not pg_available():
        if IN_CI:
            pytest.fail(f"CI needs PostgreSQL at {PG_ADMIN_URL}")
        pytest.skip(f"no PostgreSQL at {PG_ADMIN_URL}")
    name = f"milepost_readme_{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        with _pg_connect(PG_ADMIN_URL) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def user_env() -> dict[str, str]:
    """A shell with `milepost` on PATH (the README's `source .venv/bin/activate`)."""
    return clean_env(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def test_the_readme_server_section_runs_as_written(tmp_path: Path, pg_name: str) -> None:
    require_nats()  # the README's worker uses NATS
    port = free_port()
    script = (
        server_block()
        .replace("5432/milepost", f"5432/{pg_name}")
        .replace("-U postgres milepost", f"-U postgres {pg_name}")
        .replace("8082", str(port))
    )
    assert "milepost execute examples/hello_world --wait" in script
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        # its own session: the server and the worker it starts with `&` are stopped with it
        shell = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=ROOT,
            env=user_env(),
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            code = shell.wait(timeout=240)
        finally:
            with_group(shell.pid, signal.SIGTERM)
    text = out.read_text()
    assert code == 0, f"{text}\n{tail(err)}"
    started = re.search(r"execution (\d+) started", text)
    assert started, text
    assert "COMPLETED" in text and "HELLO, ADA!" in text  # the run's steps and results
    xid = started.group(1)
    listed = text.split(started.group(0), 1)[1]
    assert xid in listed  # `milepost list`, then `describe` of the latest run
    assert re.search(r"shout\s+.*COMPLETED", listed), text


def with_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return


def milepost(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MILEPOST, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**user_env(), **(env or {})},
        cwd=ROOT,
    )


def test_db_upgrade_of_a_database_that_does_not_exist_says_so_at_once(pg_name: str) -> None:
    url = PG_ADMIN_URL.rpartition("/")[0] + f"/{pg_name}"
    done = milepost("db", "upgrade", env={"MILEPOST_DATABASE_URL": url}, timeout=30)
    assert done.returncode == 2, done.stderr
    assert f"database '{pg_name}' does not exist" in done.stderr and "createdb" in done.stderr
    assert "Traceback" not in done.stderr and "error connecting" not in done.stderr


def test_local_commands_run_the_embedded_engine_on_postgresql(pg_name: str) -> None:
    with _pg_connect(PG_ADMIN_URL) as conn:
        conn.execute(f'CREATE DATABASE "{pg_name}"')
    env = {"MILEPOST_DATABASE_URL": PG_ADMIN_URL.rpartition("/")[0] + f"/{pg_name}"}
    assert milepost("db", "upgrade", env=env).returncode == 0
    ran = milepost("run", "examples/hello_world.yaml", "--set", "name=Ada", "--json", env=env)
    assert ran.returncode == 0, ran.stderr
    xid = json.loads(ran.stdout)["execution_id"]
    assert milepost("list", "-q", env=env).stdout.split() == [xid]
    described = json.loads(milepost("describe", xid, "--json", env=env).stdout)
    assert described["steps"]["shout"]["status"] == "COMPLETED"


def test_register_names_the_file_and_the_problem(tmp_path: Path) -> None:
    files = {
        "latin1.yaml": b"apiVersion: noetl.io/v2\nname: caf\xe9\n",
        "empty.yaml": b"",
        "invalid.yaml": b"apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: x, "
        b"path: x}\nworkflow:\n  - step: a\n",
    }
    said = {
        "latin1.yaml": "not UTF-8 text (byte 33 is 0xe9)",
        "empty.yaml": "the file is empty",
        "invalid.yaml": "step 'a': field 'tool' is required (line 5)",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        # checked before the server is asked: none listens on port 9
        done = milepost("register", str(tmp_path / name), "--server", "http://127.0.0.1:9")
        assert done.returncode == 2, (name, done.stderr)
        assert str(tmp_path / name) in done.stderr and said[name] in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_execute_wait_prints_the_id_follows_the_run_and_a_ctrl_c_leaves_it_going(
    tmp_path: Path,
) -> None:
    with Cluster.running(
        f"sqlite:///{tmp_path / 'server.db'}", tmp_path, use_nats=False
    ) as cluster:
        gate = tmp_path / "gate"
        pb = tmp_path / "slow.yaml"
        pb.write_text(SLOW.replace("GATE", str(gate)))
        env = {"MILEPOST_SERVER_URL": cluster.url, "MILEPOST_TOKEN": cluster.admin_token}
        registered = milepost("register", str(pb), "--output", "json", env=env)
        assert registered.returncode == 0, registered.stderr
        entry = json.loads(registered.stdout)  # the file with the server's catalog entry
        assert (entry["file"], entry["registered"], entry["path"], entry["version"]) == (
            str(pb),
            True,
            "tests/slow",
            1,
        )
        proc = subprocess.Popen(
            [MILEPOST, "execute", "tests/slow", "--wait"],
            env={**user_env(), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()  # at once, while the run goes
        xid = re.match(r"execution (\d+) started", first)
        assert xid, first
        wait_for(
            lambda: (
                cluster.client.status(xid.group(1))["steps"].get("hold", {}).get("status")
                == "RUNNING"
            ),
            "the step to run",
            timeout=60,
        )
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert f"execution {xid.group(1)} goes on" in err, (out, err)
        assert f"milepost events {xid.group(1)} --follow --server {cluster.url}" in err
        assert "Traceback" not in err
        assert cluster.client.status(xid.group(1))["status"] == "RUNNING"  # not cancelled
        again = subprocess.Popen(
            [MILEPOST, "execute", "tests/slow", "--wait", "--json"],
            env={**user_env(), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        gate.touch()
        out, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        assert json.loads(out)["steps"]["hold"]["result"] == "opened"
        assert re.search(r"execution \d+ started", err)  # off stdout: stdout is the JSON
        assert "step.exit" in err and "execution.completed" in err
