"""The embedded engine runs every pool (DSL 10.6): one machine runs everything, so a step
with `spec.pool` runs in the in-process workers, and its commands keep their pool."""

from __future__ import annotations

import asyncio
from pathlib import Path

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore

TEXT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: pooled, path: tests/pooled}
executor: {spec: {pool: cpu}}
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
    next: train
  - step: train
    spec: {pool: gpu}
    loop: {in: "{{ [1, 2, 3] }}", iterator: n, spec: {mode: parallel}}
    tool: {kind: python, input: {n: "{{ n }}"}, code: "result = n * 2"}
"""


def test_the_embedded_engine_runs_a_pooled_step(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "e.db")
    pb = load.load_text(TEXT)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store) as engine:
            return await engine.run(pb, TEXT, timeout=60)

    try:
        state = asyncio.run(go())
        assert state.status == st.COMPLETED, state.error
        assert list(state.results["train"]) == [2, 4, 6]
        issued = [e for e in store.load(state.execution_id) if e.event_type == ev.COMMAND_ISSUED]
        rows = store.get_commands([int(e.payload["command_id"]) for e in issued])
        assert sorted((r.step, r.pool) for r in rows.values()) == [
            ("start", "cpu"),
            ("train", "gpu"),
            ("train", "gpu"),
            ("train", "gpu"),
        ]
    finally:
        store.close()
