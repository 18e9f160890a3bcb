"""An approved step whose process dies mid-request, in the embedded mode as people use it:
`milepost run` drives the run, `milepost approve --db` votes from another process (the
vote alone; the driver grants on its next look), `kill -9` takes the driver down while the
tool's request is out, and `milepost resume` carries on.

A command in flight when its driver died never reported: the resumed run hands it out
again with the same attempt, so the same `Idempotency-Key` and the same operation key
reach the receiving system (DSL 10.4), which can tell the repeat.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from milepost import ids
from milepost.core import events as ev
from milepost.store.sqlite import SQLiteStore
from tests import approval_world as world
from tests.acceptance.harness import MILEPOST, Proc, tail
from tests.approval_world import Upstream
from tests.shared import wait_for

pytestmark = pytest.mark.slow


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MILEPOST, *args], env=env, capture_output=True, text=True, timeout=60)


def test_a_killed_driver_s_approved_request_is_resent_with_the_same_keys(tmp_path: Path) -> None:
    db = tmp_path / "milepost.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILEPOST_")}
    env["PYTHONUNBUFFERED"] = "1"
    with world.upstream() as api:
        run_killed_driver(api, db, tmp_path, env)


def run_killed_driver(api: Upstream, db: Path, tmp_path: Path, env: dict[str, str]) -> None:
    route = "/local/pay"
    playbook = tmp_path / "pay.yaml"
    playbook.write_text(world.gated("local/pay", api.url + route))
    api.hold(route)
    driver = Proc(
        "run", [MILEPOST, "run", str(playbook), "--db", str(db)], env, tmp_path / "run.log"
    )
    try:
        store = SQLiteStore(db)
        try:
            [row] = wait_for(
                lambda: store.list_approvals(status="pending"),
                f"the approval request (log: {tail(driver.log)})",
                timeout=30,
            )
            voted = cli(
                "approve", str(row.approval_id), "--db", str(db), "--user", "alice", env=env
            )
            assert voted.returncode == 0, voted.stderr
            wait_for(lambda: api.count(route) == 1, "the approved request", timeout=20)
            driver.kill9()  # the request is out, its report never made
        finally:
            store.close()
    finally:
        api.release(route)
        driver.stop()
    xid = row.execution_id
    resumed = cli("resume", str(xid), "--db", str(db), env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    first, second = api.requests(route)
    key = ids.idempotency_key(xid, "pay", 1, None, 1)
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"] == key
    assert (
        first.headers["x-operation-key"]
        == second.headers["x-operation-key"]
        == ids.operation_key(xid, "pay", 1, None)
    )
    store = SQLiteStore(db)
    try:
        events = store.load(xid)
    finally:
        store.close()
    kinds = [(e.event_type, e.step) for e in events]
    assert kinds.count((ev.COMMAND_ISSUED, "pay")) == 1, "the same command, not a new attempt"
    assert kinds.count((ev.APPROVAL_REQUESTED, "pay")) == 1
    assert kinds.count((ev.APPROVAL_GRANTED, "pay")) == 1
    assert events[-1].event_type == ev.EXECUTION_COMPLETED
