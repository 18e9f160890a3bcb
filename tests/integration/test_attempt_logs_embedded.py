"""Attempt logs in the embedded mode: what python and shell steps print (stdout, stderr,
the traceback with the step's line) is stored per attempt, redacted and capped, outside
the event log (`core.logs`, `engine.attempt_logs`)."""

from __future__ import annotations

import asyncio
import json
import textwrap
from typing import Any

from milepost.core import state as st
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/logs}\n"

PRINTS_AND_RAISES = """
workload:
  api_key: sk-live-abcdefghijklmnopqrstuvwx
workflow:
  - step: start
    tool:
      kind: shell
      command: "echo to-out; echo to-err >&2"
    next: [{step: compute}]
  - step: compute
    tool:
      kind: python
      input: {key: "{{ workload.api_key }}"}
      code: |
        import sys
        print("the key is", key)
        print("warming up", file=sys.stderr)
        def divide(n):
            return 10 / n
        result = divide(0)
"""


def run(store: Any, body: str, **engine: Any) -> st.ExecutionState:
    text = HEADER + textwrap.dedent(body)
    pb = load.load_text(text)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=2, **engine) as running:
            return await running.run(pb, text)

    return asyncio.run(go())


def test_a_python_step_that_prints_and_raises_keeps_its_streams_and_traceback(store: Any) -> None:
    state = run(store, PRINTS_AND_RAISES)
    assert state.status == st.FAILED
    logs = store.attempt_logs(state.execution_id)
    by = {(r.step, r.stream): r for r in logs}
    assert [(r.step, r.stream) for r in logs] == [
        ("start", "stdout"),
        ("start", "stderr"),
        ("compute", "stdout"),
        ("compute", "stderr"),
        ("compute", "traceback"),
    ]
    assert by["start", "stdout"].text == "to-out\n" and by["start", "stderr"].text == "to-err\n"
    # the workload's secret the step printed is masked, as in its events
    assert by["compute", "stdout"].text == "the key is ***\n"
    assert by["compute", "stderr"].text == "warming up\n"
    trace = by["compute", "traceback"].text
    assert 'File "<step compute>", line 6, in <module>\n    result = divide(0)' in trace
    assert 'File "<step compute>", line 5, in divide\n    return 10 / n' in trace
    assert trace.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "python_worker" not in trace
    # the error names the step's line; the event log carries none of the printed text
    events = store.load(state.execution_id)
    assert all("the key is" not in json.dumps([e.payload, e.meta]) for e in events)
    [failed] = [e for e in events if e.event_type == "command.failed"]
    assert (failed.payload["error"]["line"], failed.payload["error"]["code_line"]) == (
        5,
        "return 10 / n",
    )
    assert state.error is not None and state.error.get("line") == 5, state.error
    # ordered by cursor, readable from one
    cursors = [r.log_id for r in logs]
    assert cursors == sorted(cursors)
    assert store.attempt_logs(state.execution_id, after=cursors[1]) == logs[2:]
    assert store.attempt_logs(state.execution_id, step="start") == logs[:2]


def test_each_stream_is_capped_keeping_head_and_tail(store: Any) -> None:
    body = """
    workflow:
      - step: start
        tool:
          kind: python
          code: |
            print("A" * 2000 + "B" * 10000 + "C" * 2000, end="")
            result = 1
    """
    state = run(store, body, log_cap=1024)
    assert state.status == st.COMPLETED
    [row] = store.attempt_logs(state.execution_id)
    seam = 128  # dropped on each side of the cut (`core.logs.SEAM`, a quarter of a half)
    assert row.cut == 14000 - 1024 + 2 * seam
    assert row.text == "A" * (512 - seam) + f"\n[... {row.cut} bytes cut ...]\n" + "C" * (
        512 - seam
    )
