"""The embedded engine runs as many python steps at once as it has workers, whichever runs
they belong to, and stops the extra python processes once idle (issue 33, item 11; the
`milepost worker` side: tests/acceptance/test_python_slots_server.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from milepost.core import state as st
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from tests.python_slots import held, let_go, started
from tests.shared import process_gone, wait_for_async

BUSY = held("busy", 3)
ONE = held("one", 1)


def test_python_steps_of_two_runs_run_at_once_up_to_the_concurrency_then_idle_ones_stop(
    store: SQLiteStore, tmp_path: Path
) -> None:
    """Two warm processes used to serve every run: a run's python steps waited on another
    run's while most of the engine's workers were free."""

    async def go() -> tuple[dict[str, int], list[st.ExecutionState], list[int], str]:
        async with EmbeddedEngine(
            store, concurrency=4, python_workers=1, python_idle_seconds=0.5
        ) as engine:
            workload = {"out": str(tmp_path)}
            xids = [
                engine.start(load.load_text(BUSY), BUSY, workload),
                engine.start(load.load_text(ONE), ONE, workload),
            ]
            holding = await wait_for_async(
                lambda: (found := started(tmp_path)) and len(found) == 4 and found,
                "the four python steps of both runs holding a process each at once",
                timeout=60,
            )
            let_go(tmp_path)
            states = [await engine.wait(xid, timeout=60) for xid in xids]
            pool = engine.workers.tools.python
            # the three beyond the warm one stop once idle for half a second
            pids = set(holding.values())
            await wait_for_async(
                lambda: sum(map(process_gone, pids)) == 3, "the idle processes to stop"
            )
            [warm] = pool.pids
            assert not process_gone(warm)  # the one kept warm
            return holding, states, [warm], pool.describe()

    holding, states, kept, described = asyncio.run(go())
    assert sorted(holding) == [
        "started-busy-0",
        "started-busy-1",
        "started-busy-2",
        "started-one-0",
    ]
    assert len(set(holding.values())) == 4, "each step in a process of its own"
    assert [s.status for s in states] == [st.COMPLETED, st.COMPLETED]
    assert described == "python: up to 4 processes, 1 kept warm"
    assert set(kept) < set(holding.values())
