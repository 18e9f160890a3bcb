"""End to end: `milepost server` + HTTP workers as processes, on SQLite and PostgreSQL.

Each test gets a fresh database (PostgreSQL: created and dropped here; skipped when
unreachable, a failure under CI). Side effects are counted in a file that the playbook's
python code appends to with O_APPEND (one `write` per line: atomic), so "ran exactly
once" is checked outside the engine.
"""

from __future__ import annotations

import collections
import signal
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.harness import Cluster, database, tail
from tests.shared import wait_for
from tests.sql import query

pytestmark = pytest.mark.slow

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\n"

# Appends "<tag> <index> <idempotency key>" to workload.out, then waits while
# workload.block exists (at most 40 s), so a test can hold a command mid-attempt.
SIDE_EFFECT = """\
import os, time
fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
try:
    os.write(fd, f"{tag} {i} {key}\\n".encode())
finally:
    os.close(fd)
deadline = time.time() + 40
while block and os.path.exists(block) and time.time() < deadline:
    time.sleep(0.02)
result = {"i": i, "key": key}
"""


def playbook(path: str, body: str) -> str:
    return (
        HEADER
        + f"metadata: {{name: {path.rsplit('/', 1)[-1]}, path: {path}}}\n"
        + textwrap.dedent(body)
    )


def side_effect_tool(tag: str, index: str = "-1") -> str:
    code = textwrap.indent(SIDE_EFFECT, " " * 8)
    return f"""\
    tool:
      kind: python
      input: {{i: "{index}", key: "{{{{ idempotency_key }}}}", out: "{{{{ workload.out }}}}",
              block: "{{{{ workload.block }}}}", tag: {tag}}}
      code: |
{code}"""


HELD = playbook(
    "acceptance/held",
    f"""\
workload: {{out: "", block: ""}}
workflow:
  - step: start
{side_effect_tool("held")}
    next: done
  - step: done
    tool: {{kind: python, input: {{r: "{{{{ start }}}}"}}, code: "result = r['key']"}}
""",
)


def lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def make_cluster(db_url: str, tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    clusters: list[Cluster] = []

    def make(**kwargs: Any) -> Cluster:
        cluster = Cluster(db_url, tmp_path, **kwargs)
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.close()


def events_of(cluster: Cluster, execution_id: str) -> list[dict[str, Any]]:
    return cluster.client.events(execution_id)


# -- the happy path --------------------------------------------------------------------------


def test_a_registered_playbook_runs_to_completion_on_workers(
    make_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    secret = "acc-Secret-Value-9731"
    cluster = make_cluster()
    cluster.start_server()
    cluster.start_worker()
    cluster.start_worker()
    cluster.client.put_credential("acc_api", "generic", {"user": "bob", "password": secret})
    xid = cluster.run(
        playbook(
            "acceptance/happy",
            """\
    workload: {n: 5}
    keychain:
      - {name: api, kind: credential, credential: acc_api}
    workflow:
      - step: start
        tool: {kind: python, input: {pw: "{{ keychain.api.password }}"},
               code: "result = {'seen': 'pw=' + pw, 'length': len(pw)}"}
        next: fan
      - step: fan
        loop: {in: "{{ range(workload.n) | list }}", iterator: i,
               spec: {mode: parallel, max_in_flight: 4}}
        tool: {kind: python, input: {i: "{{ i }}"}, code: "result = i * i"}
        next: total
      - step: total
        tool: {kind: python, input: {rows: "{{ fan }}", failed: "{{ fan.stats.failed }}"},
               code: "result = {'sum': sum(rows), 'failed': failed}"}
    """,
        )
    )
    status = cluster.wait(xid)
    assert status["status"] == "COMPLETED", status
    steps = status["steps"]
    assert steps["total"]["result"] == {"sum": 30, "failed": 0}
    assert steps["start"]["result"] == {"seen": "pw=***", "length": len(secret)}
    events = events_of(cluster, xid)
    assert secret not in repr(events) and secret not in repr(status)
    reports = [e for e in events if e["event_type"] == "command.completed"]
    assert len(reports) == 7
    assert all(e["worker_id"] in ("worker-1", "worker-2") for e in reports)
    assert all(e["meta"]["epoch"] >= 1 and not e["meta"].get("stale") for e in reports)
    for worker in cluster.workers:
        assert secret not in worker.log.read_text()
    # no table holds the secret in clear: not the log, not the projections, not the vault
    assert _tables_containing(cluster.db_url, secret) == []
    assert "event" in _tables_containing(cluster.db_url, str(xid))  # the scan does read rows


def _tables_containing(db_url: str, needle: str) -> list[str]:
    """Every table whose rows, as text, contain `needle` (ciphertext included)."""
    from milepost.store.factory import open_store

    store = open_store(db_url)
    try:
        if db_url.startswith("postgres"):
            names = [
                r[0]
                for r in query(
                    store,
                    "SELECT table_name FROM information_schema.tables WHERE table_schema='public'",
                    (),
                )
            ]
            rows = {n: query(store, f"SELECT t::text FROM {n} t", ()) for n in names}
        else:
            names = [
                r[0] for r in query(store, "SELECT name FROM sqlite_master WHERE type='table'", ())
            ]
            rows = {n: query(store, f"SELECT * FROM {n}", ()) for n in names}
    finally:
        store.close()
    found = [n for n, content in rows.items() if needle in repr(content)]
    assert names, "no tables read"
    return sorted(found)


def test_sigterm_lets_the_running_attempt_finish_and_exits_zero(
    make_cluster: Callable[..., Cluster],
    tmp_path: Path,
) -> None:
    out, block = tmp_path / "side.txt", tmp_path / "block"
    block.touch()
    cluster = make_cluster()
    cluster.start_server()
    worker = cluster.start_worker(grace_seconds=30)
    xid = cluster.run(HELD, {"out": str(out), "block": str(block)})
    wait_for(lambda: lines(out), "the attempt to start", timeout=30)
    worker.signal(signal.SIGTERM)
    block.unlink()
    assert worker.popen.wait(30) == 0, tail(worker.log)
    reported = [e for e in cluster.client.events(xid) if e["event_type"] == "command.completed"]
    assert [(e["step"], e["worker_id"]) for e in reported] == [("start", "worker-1")], (
        "the draining worker reported its attempt before it exited"
    )
    assert not (reported[0].get("meta") or {}).get("stale")
    cluster.start_worker()  # runs the next step
    assert cluster.wait(xid)["status"] == "COMPLETED"
    assert len(lines(out)) == 1


# -- (a) the claim race ---------------------------------------------------------------------


def test_eight_workers_race_for_2000_commands_and_each_runs_once(
    make_cluster: Callable[..., Cluster],
    tmp_path: Path,
) -> None:
    out = tmp_path / "side.txt"
    cluster = make_cluster()
    cluster.start_server()
    for _ in range(8):
        cluster.start_worker(concurrency=8, python_workers=2)
    xid = cluster.run(
        playbook(
            "acceptance/race",
            f"""\
workload: {{n: 2000, out: "", block: ""}}
workflow:
  - step: start
    loop: {{in: "{{{{ range(workload.n) | list }}}}", iterator: i,
           spec: {{mode: parallel, max_in_flight: 256}}}}
{side_effect_tool("race", "{{ i }}")}
""",
        ),
        {"out": str(out)},
    )
    status = cluster.wait(xid, timeout=120)
    assert status["status"] == "COMPLETED", status
    rows = lines(out)
    by_index = collections.Counter(int(row[1]) for row in rows)
    assert len(rows) == 2000 and set(by_index) == set(range(2000)), [
        i for i, n in by_index.items() if n > 1
    ][:10]
    assert len({row[2] for row in rows}) == 2000, "one idempotency key per command"
    workers = {
        e["worker_id"] for e in events_of(cluster, xid) if e["event_type"] == "command.completed"
    }
    assert len(workers) >= 4, f"the work spread over the workers: {workers}"


# -- (b) a worker dies mid-command ----------------------------------------------------------


def test_a_command_of_a_killed_worker_is_reissued_after_its_lease(
    make_cluster: Callable[..., Cluster],
    tmp_path: Path,
) -> None:
    out, block = tmp_path / "side.txt", tmp_path / "block"
    block.touch()
    cluster = make_cluster(lease_seconds=2)
    cluster.start_server()
    first = cluster.start_worker()
    xid = cluster.run(HELD, {"out": str(out), "block": str(block)})
    wait_for(lambda: lines(out), "the first attempt to start", timeout=30)
    first.kill9()
    block.unlink()
    cluster.start_worker()
    status = cluster.wait(xid)
    assert status["status"] == "COMPLETED", status
    rows = lines(out)
    assert len(rows) == 2 and rows[0][2] != rows[1][2], rows
    assert status["steps"]["done"]["result"] == rows[1][2], "the re-issued attempt's result"
    types = [e["event_type"] for e in events_of(cluster, xid)]
    assert types.count("command.lease_expired") == 1


# -- (c) a paused worker comes back after its lease ------------------------------------------


def test_a_late_report_from_a_paused_worker_changes_nothing(
    make_cluster: Callable[..., Cluster],
    tmp_path: Path,
) -> None:
    out, block = tmp_path / "side.txt", tmp_path / "block"
    block.touch()
    cluster = make_cluster(lease_seconds=2)
    cluster.start_server()
    paused = cluster.start_worker()
    xid = cluster.run(HELD, {"out": str(out), "block": str(block)})
    wait_for(lambda: lines(out), "the first attempt to start", timeout=30)
    paused.signal(signal.SIGSTOP, group=True)  # the worker and its python process
    try:
        cluster.start_worker()
        block.unlink()
        status = cluster.wait(xid)
        assert status["status"] == "COMPLETED", status
        # read while the paused worker cannot report yet: after SIGCONT it may at once
        before = events_of(cluster, xid)
    finally:
        paused.signal(signal.SIGCONT, group=True)
    log = paused.log

    def settled() -> str | None:
        text = log.read_text()
        return next((s for s in ("reported ok", "lease lost") if s in text), None)

    outcome = wait_for(settled, "the paused worker to notice or report", timeout=30)
    after = cluster.wait(xid)
    assert after == status, "the late worker changed the run"
    rows = lines(out)
    keys = collections.Counter(row[2] for row in rows)
    assert len(rows) == 2 and set(keys.values()) == {1}, rows
    assert status["steps"]["done"]["result"] == rows[1][2]
    events = events_of(cluster, xid)
    late = [
        e
        for e in events
        if e["worker_id"] == "worker-1"
        and e["event_type"] in ("command.completed", "command.failed")
    ]
    # the run had ended when the late report came: its log still ends with its end
    assert not late, late
    assert len(events) == len(before) and events[-1]["event_type"] == "execution.completed"
    if outcome == "reported ok":
        assert "not stored: its run had ended" in log.read_text(), "the server told the worker so"


# -- (d) the server dies mid-run ------------------------------------------------------------


def test_every_run_completes_when_the_server_is_killed_and_restarted(
    make_cluster: Callable[..., Cluster],
    tmp_path: Path,
) -> None:
    out = tmp_path / "side.txt"
    cluster = make_cluster(lease_seconds=5)
    cluster.start_server()
    for _ in range(3):
        cluster.start_worker(concurrency=4)
    body = playbook(
        "acceptance/restart",
        f"""\
workload: {{n: 40, out: "", block: ""}}
workflow:
  - step: start
    loop: {{in: "{{{{ range(workload.n) | list }}}}", iterator: i,
           spec: {{mode: parallel, max_in_flight: 6}}}}
{side_effect_tool("restart", "{{ i }}")}
    next: total
  - step: total
    tool: {{kind: python, input: {{rows: "{{{{ start }}}}"}}, code: "result = len(rows)"}}
""",
    )
    entry = cluster.client.register(body)
    runs = [
        cluster.client.execute(entry["path"], {"out": str(out), "n": 40}, version=entry["version"])
        for _ in range(3)
    ]
    wait_for(lambda: len(lines(out)) >= 20, "some progress before the crash", timeout=30)
    cluster.kill_server()
    cluster.start_server()
    for xid in runs:
        status = cluster.wait(xid, timeout=60)
        assert status["status"] == "COMPLETED", status
        assert status["steps"]["total"]["result"] == 40
    assert all(w.alive() for w in cluster.workers), "workers ride out the restart"
