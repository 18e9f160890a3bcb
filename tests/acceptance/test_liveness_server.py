"""Liveness and stalls on a cluster (`milepost server` + worker processes), SQLite and
PostgreSQL: a step's own liveness is its lease (not the engine's 30 s), a heartbeating
attempt that outlives its liveness is never declared lost, and `stall_after` fails a run
that makes no progress, naming what it waited for."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.harness import Cluster, database
from tests.acceptance.test_cluster import playbook
from tests.integration import test_liveness_embedded as embedded
from tests.shared import wait_for

pytestmark = pytest.mark.slow

# "<idempotency key> <operation key>" to workload.out, then waits while workload.block
# exists (at most 40 s)
KEYS_THEN_BLOCK = """\
import os, time
fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
try:
    os.write(fd, f"{key} {op}\\n".encode())
finally:
    os.close(fd)
deadline = time.time() + 40
while os.path.exists(block) and time.time() < deadline:
    time.sleep(0.02)
result = key
"""


SHORT_LIVENESS = playbook(
    "acceptance/short_liveness",
    f"""\
workload: {{out: "", block: ""}}
workflow:
  - step: start
    spec: {{liveness: 2s}}
    tool:
      kind: python
      input: {{key: "{{{{ idempotency_key }}}}", op: "{{{{ operation_key }}}}",
              out: "{{{{ workload.out }}}}", block: "{{{{ workload.block }}}}"}}
      code: |
{textwrap.indent(KEYS_THEN_BLOCK, " " * 8)}
""",
)


@pytest.fixture(params=["sqlite", "postgres"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    # the engine's lease is long: whatever lapses sooner lapses by the step's own liveness
    with database(request.param, tmp_path) as url, Cluster(url, tmp_path, lease_seconds=30) as made:
        yield made


def events_of(cluster: Cluster, xid: str, etype: str) -> list[dict[str, Any]]:
    return [e for e in cluster.client.events(xid) if e["event_type"] == etype]


def rows(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_a_silent_attempt_is_lost_after_its_step_s_liveness_and_issued_again(
    cluster: Cluster,
    tmp_path: Path,
) -> None:
    out, block = tmp_path / "keys.txt", tmp_path / "block"
    block.touch()
    cluster.start_server()
    first = cluster.start_worker()
    xid = cluster.run(SHORT_LIVENESS, {"out": str(out), "block": str(block)})
    wait_for(lambda: rows(out), "the first attempt to start", timeout=30)
    first.kill9()
    block.unlink()
    cluster.start_worker()
    # well before the engine's 30 s lease could have lapsed
    status = cluster.wait(xid, timeout=20)
    assert status["status"] == "COMPLETED", status
    (key1, op1), (key2, op2) = rows(out)
    assert key1 != key2 and op1 == op2, "a new attempt of the same operation"
    assert status["steps"]["start"]["result"] == key2
    [lost] = events_of(cluster, xid, "command.lease_expired")
    assert lost["result"]["context"]["attempt"] == 1
    issued = events_of(cluster, xid, "command.issued")
    assert [e["result"]["context"]["lease_s"] for e in issued] == [2.0, 2.0]
    assert [e["result"]["context"]["attempt"] for e in issued] == [1, 2]


HEARTBEATING = playbook(
    "acceptance/heartbeating",
    """\
workflow:
  - step: start
    spec: {liveness: 1500ms}
    tool: {kind: python, code: "import time\\ntime.sleep(5)\\nresult = 'slept'"}
""",
)


def test_an_attempt_heartbeating_past_its_liveness_is_never_declared_lost(
    cluster: Cluster,
) -> None:
    """The attempt runs 5 s with a 1.5 s liveness: the worker heartbeats every third of
    the lease its claim gave (0.5 s), not of the 30 s it asked for."""
    cluster.start_server()
    cluster.start_worker()
    xid = cluster.run(HEARTBEATING)
    status = cluster.wait(xid, timeout=30)
    assert status["status"] == "COMPLETED", status
    assert status["steps"]["start"]["result"] == "slept"
    assert events_of(cluster, xid, "command.lease_expired") == []
    assert len(events_of(cluster, xid, "command.issued")) == 1


STALLS = playbook(
    "acceptance/stalls",
    """\
executor: {spec: {stall_after: 3s, timeout: 2s}}
workflow:
  - step: start
    tool: {kind: noop}
""",
)


def test_a_run_without_progress_for_stall_after_fails_naming_what_it_waited_for(
    cluster: Cluster,
) -> None:
    cluster.start_server()  # and no worker: its command stays queued
    xid = cluster.run(STALLS)
    status = cluster.wait(xid, timeout=30)
    assert status["status"] == "FAILED", status
    error = status["error"]
    assert error["kind"] == "stalled"
    assert "executor.spec.stall_after 3s" in error["message"]
    assert "step 'start' attempt 1 (queued, no worker took it)" in error["message"]
    assert [(c["step"], c["status"]) for c in error["waiting"]["commands"]] == [("start", "queued")]
    [started] = events_of(cluster, xid, "execution.started")
    assert started["result"]["context"]["stall_after"] == 3.0


STALLS_AFTER_A_COMPENSABLE_STEP = playbook(
    "acceptance/stalls_compensated",
    """\
executor: {spec: {stall_after: 3s, timeout: 2s}}
workflow:
  - step: start
    tool: {kind: noop}
    spec: {compensation: undo}
    next: hold
  - step: hold
    tool: {kind: noop}
    spec: {pool: nobody}
  - step: undo
    tool: {kind: noop}
""",
)


def test_a_stalled_run_runs_its_compensations_before_it_fails(cluster: Cluster) -> None:
    """No worker serves the pool of `hold`: the run stalls, and ends as a failed step
    ends it (DSL 10.5): `start`'s compensation first, then FAILED of kind `stalled`."""
    cluster.start_server()
    cluster.start_worker()
    cluster.workers_live()  # `start` must find it within the 3 s window
    xid = cluster.run(STALLS_AFTER_A_COMPENSABLE_STEP)
    status = cluster.wait(xid, timeout=30)
    assert status["status"] == "FAILED", status
    assert status["error"]["kind"] == "stalled"
    assert len(events_of(cluster, xid, "execution.stalled")) == 1
    assert len(events_of(cluster, xid, "compensation.completed")) == 1, [
        (e["event_type"], e["step"]) for e in cluster.client.events(xid)
    ]
    [settled] = events_of(cluster, xid, "command.failed")
    assert settled["step"] == "hold"


FOREVER = playbook(
    "acceptance/forever",
    """\
workflow:
  - step: start
    tool: {kind: python, code: "import time\\ntime.sleep(30)\\nresult = 'slept'"}
""",
)


def test_the_engine_s_default_timeout_ends_an_attempt_that_heartbeats_forever(
    cluster: Cluster,
) -> None:
    cluster.env["MILEPOST_DEFAULT_TIMEOUT"] = "2"
    cluster.start_server()
    worker = cluster.start_worker()
    xid = cluster.run(FOREVER)
    status = cluster.wait(xid, timeout=20)
    assert status["status"] == "FAILED", status
    assert status["error"]["kind"] == "timeout"
    assert "default_timeout of 2s" in status["error"]["message"]
    assert events_of(cluster, xid, "command.lease_expired") == []
    # its worker learns it on its next heartbeat and abandons the attempt
    wait_for(lambda: "lease lost" in worker.log.read_text(), "the worker to let go", timeout=20)


RETRIES_LATER = playbook("acceptance/retries_later", embedded.RETRIES_LATER)


def test_a_run_waiting_for_its_retry_timer_past_stall_after_is_not_stalled_and_its_lease_covers_its_timeout(
    cluster: Cluster,
    tmp_path: Path,
) -> None:
    """Its first attempt times out after 1 s; the retry waits 4 s, twice the stall window:
    the run is idle as designed. Each attempt's lease is its timeout plus the engine's 30 s
    (DSL 10.2: never below the timeout)."""
    cluster.start_server()
    cluster.start_worker()
    cluster.workers_live()  # the first attempt must find it within the 2 s window
    xid = cluster.run(RETRIES_LATER, {"marker": str(tmp_path / "marker")})
    status = cluster.wait(xid, timeout=30)
    assert status["status"] == "COMPLETED", status
    assert status["steps"]["start"]["result"] == "again"
    issued = events_of(cluster, xid, "command.issued")
    assert [e["result"]["context"]["lease_s"] for e in issued] == [31.0, 31.0]
