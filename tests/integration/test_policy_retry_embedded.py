"""A task policy's retry in the embedded mode (issue 33, item 12): while a python step that
raised waits 10 minutes for its policy's next try, inside the same attempt, the status,
the doctor, the describe, the runs list and the logs say so at once, with the error and its
traceback. The server's side: tests/acceptance/test_retry_wait_server.py."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from milepost.cli.reads import LocalRuns
from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from tests.policy_wait import RAISES_THEN_WAITS
from tests.shared import wait_for_async


def test_a_policy_retry_waiting_inside_its_attempt_is_named_by_every_read(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    store = SQLiteStore(db)
    seen: dict[str, Any] = {}

    async def go() -> st.ExecutionState:
        # the reads of `milepost ... --db` on the database the engine drives the run in
        local = LocalRuns(db)
        async with EmbeddedEngine(store, concurrency=2) as running:
            xid = running.start(load.load_text(RAISES_THEN_WAITS), RAISES_THEN_WAITS)
            await wait_for_async(
                lambda: any(e.event_type == ev.CALL_ERROR for e in local.store.load(xid)),
                "the worker's note of its policy retry",
                timeout=60,
            )
            seen.update(
                xid=xid,
                status=local.status(xid),
                doctor=local.diagnosis(xid),
                describe=local.describe(xid),
                row=local.executions(status=None, path=None, since=None, limit=10)[0],
                logs=local.logs(xid, step=None, after=0),
                commands=[e for e in local.store.load(xid) if e.event_type == ev.COMMAND_ISSUED],
            )
            running.cancel(xid)  # the attempt, asleep in its policy's wait, is stopped
            ended = await running.wait(xid, timeout=60)
            local.close()
            return ended

    try:
        ended = asyncio.run(go())
    finally:
        store.close()
    assert ended.status == st.CANCELLED
    (wait,) = seen["status"]["waits"]
    assert (wait["kind"], wait["step"], wait["attempt"], wait["attempts"]) == (
        "policy_retry",
        "flaky",
        2,
        3,
    )
    assert wait["error"]["message"] == "ValueError: the input file is missing"
    assert seen["describe"]["waits"] == [wait] and seen["row"]["waiting"] == wait
    (finding,) = seen["doctor"]["findings"]
    assert finding["kind"] == "retry_pending" and finding["fields"]["retry"] == "policy"
    assert re.search(r"retrying in \d+m \d\ds", finding["message"]), finding["message"]
    assert "attempt 2 of 3, after: ValueError: the input file is missing" in finding["message"]
    # the failed execution's output and traceback, readable while the retry waits
    streams = {e["stream"]: e["text"] for e in seen["logs"]["entries"]}
    assert streams["stdout"] == "about to fail\n"
    assert streams["traceback"].rstrip().endswith("ValueError: the input file is missing")
    assert len(seen["commands"]) == 1  # one attempt: the policy's retry issued no command
