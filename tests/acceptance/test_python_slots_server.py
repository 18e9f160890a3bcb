"""A `milepost worker` runs as many python steps at once as its concurrency, whichever runs
they belong to, says so as it starts, and stops the extra python processes once idle (issue
33, item 11; the embedded side: tests/integration/test_python_slots_embedded.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from milepost.core import state as st
from tests.acceptance.harness import Cluster, database
from tests.python_slots import held, let_go, started
from tests.shared import process_gone, wait_for

pytestmark = pytest.mark.slow


def test_python_steps_of_two_runs_run_at_once_up_to_the_concurrency_then_idle_ones_stop(
    tmp_path: Path,
) -> None:
    """Two warm processes used to serve every run while the worker announced concurrency
    16: a run's python steps waited on another run's."""
    out = tmp_path / "steps"
    out.mkdir()
    with database("sqlite", tmp_path) as url, Cluster(url, tmp_path) as cluster:
        cluster.start_server()
        worker = cluster.start_worker(
            concurrency=4, python_workers=1, env={"MILEPOST_PYTHON_IDLE_SECONDS": "0.5"}
        )
        xids = [
            cluster.run(held(name, count), {"out": str(out)})
            for name, count in (("busy", 3), ("one", 1))
        ]
        holding = wait_for(
            lambda: (found := started(out)) and len(found) == 4 and found,
            "the four python steps of both runs holding a process each at once",
            timeout=60,
        )
        let_go(out)
        assert [cluster.wait(xid)["status"] for xid in xids] == [st.COMPLETED, st.COMPLETED]
        pids = set(holding.values())
        assert len(pids) == 4, "each step in a process of its own"
        # the three beyond the warm one stop once idle for half a second; the warm one stays
        wait_for(lambda: sum(map(process_gone, pids)) == 3, "the idle processes to stop")
        assert worker.alive()
        assert (
            "(concurrency 4; python: up to 4 processes, 1 kept warm; lease 30s)"
            in worker.log.read_text()
        )
