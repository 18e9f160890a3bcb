"""A retry waiting through `milepost server` and a real worker process (issue 33, item 12),
on SQLite and PostgreSQL: a python step that raised waits 10 minutes for its task policy's
next try (inside the attempt, on the worker) and another for its `spec.retry` timer (on the
engine). While they wait, `milepost status`, `doctor`, `describe`, `list` and `logs` name
the retry, its attempt, its error and the traceback, and say the same with `--server` as
with `--db` on the server's database. The embedded side:
tests/integration/test_policy_retry_embedded.py; every view, as a property:
tests/api/test_waits.py."""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.harness import MILEPOST, Cluster, database
from tests.policy_wait import RAISES_THEN_WAITS
from tests.shared import wait_for

pytestmark = pytest.mark.slow

SPEC_RETRY = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: spec_wait, path: tests/spec_wait}
    workflow:
      - step: flaky
        spec: {retry: {max_attempts: 3, delay: 600, max_delay: 600, retry_on: [exception]}}
        tool:
          kind: python
          code: |
            print("about to fail")
            raise ValueError("the input file is missing")
    """)


@pytest.fixture(params=["sqlite", "postgres"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    with database(request.param, tmp_path) as url, Cluster.running(url, tmp_path) as made:
        yield made


def cli(cluster: Cluster, *args: str, where: str) -> subprocess.CompletedProcess[str]:
    place = ["--server", cluster.url] if where == "server" else ["--db", cluster.db_url]
    return subprocess.run(
        [MILEPOST, *args, *place],
        capture_output=True,
        text=True,
        timeout=60,
        env={**cluster.env, "MILEPOST_TOKEN": cluster.admin_token},
    )


def read(cluster: Cluster, *args: str, where: str) -> Any:
    proc = cli(cluster, *args, "--json", where=where)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize(
    ("text", "kind"), [(RAISES_THEN_WAITS, "policy_retry"), (SPEC_RETRY, "retry")]
)
def test_a_retry_waiting_is_named_by_every_read_the_same_from_the_server_and_the_database(
    cluster: Cluster, text: str, kind: str
) -> None:
    xid = cluster.run(text)
    wait_for(
        lambda: any(w["kind"] == kind for w in cluster.client.status(xid).get("waits", [])),
        f"the {kind} to be seen",
        timeout=90,
    )
    for where in ("server", "db"):
        status = read(cluster, "status", xid, where=where)
        (wait,) = status["waits"]
        assert (wait["kind"], wait["step"], wait["attempt"], wait["attempts"]) == (
            kind,
            "flaky",
            2,
            3,
        )
        assert wait["error"]["message"] == "ValueError: the input file is missing"
        assert read(cluster, "describe", xid, where=where)["waits"] == [wait]
        (row,) = [r for r in read(cluster, "list", where=where) if r["execution_id"] == xid]
        assert row["waiting"] == wait
        (finding,) = read(cluster, "doctor", xid, where=where)["findings"]
        assert finding["kind"] == "retry_pending"
        assert finding["fields"]["not_before_at"] == wait["due_at"]
        human = cli(cluster, "status", xid, where=where).stdout
        assert re.search(r"waiting: step 'flaky' retrying in \d+m \d\ds, attempt 2", human), human
        assert "attempt 2 of 3, after: ValueError: the input file is missing" in human
        # the failed attempt's output and traceback, readable while the retry waits
        logs = cli(cluster, "logs", xid, where=where).stdout
        assert "about to fail" in logs and "ValueError: the input file is missing" in logs
    cluster.client.cancel(xid)
    assert cluster.wait(xid)["status"] == "CANCELLED", cluster.diagnostics()
