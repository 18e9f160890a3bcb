"""The embedded engine's work per event does not grow with the run (the class of the
snapshots spaced evenly and of naming causes by a walk back: `tests/unit/test_core_scaling`
counts the pure core alone). Counted in lines of milepost's code run per event, and in
bytes of snapshots per event, for a wide loop of n iterations and of four times n."""

from __future__ import annotations

import asyncio
from pathlib import Path

from milepost.core import state as st
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from tests.integration.stores import SnapshotsSeen
from tests.shared import MILEPOST_CODE, LinesRun


def _wide(n: int) -> str:
    return (
        f"apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {{name: wide, path: t/wide}}\n"
        f'workflow:\n  - step: fan\n    loop: {{in: "{{{{ range({n}) | list }}}}", iterator: i,'
        f" spec: {{mode: parallel, max_in_flight: {n}}}}}\n    tool: {{kind: noop}}\n"
        f"    next: end\n  - step: end\n    tool: {{kind: noop}}\n"
    )


def _run(path: Path, n: int) -> tuple[int, int, int]:
    """Lines of milepost's modules run, snapshot bytes and events of a run of `_wide(n)`."""
    store = SnapshotsSeen(path)
    counted = LinesRun(MILEPOST_CODE)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=32) as engine:
            engine.orchestrator.snapshot_every = 50  # many snapshots even at the small size
            text = _wide(n)
            with counted:
                return await engine.run(load.load_text(text), text, timeout=300)

    try:
        state = asyncio.run(go())
        assert state.status == st.COMPLETED, state.error
        return counted.lines, sum(size for _, size in store.saved), state.last_seq
    finally:
        store.close()


def test_a_run_four_times_as_long_costs_about_four_times_the_work(tmp_path: Path) -> None:
    small = _run(tmp_path / "small.db", 150)
    large = _run(tmp_path / "large.db", 600)
    lines_small, lines_large = small[0] / small[2], large[0] / large[2]
    bytes_small, bytes_large = small[1] / small[2], large[1] / large[2]
    # linear work keeps what an event costs (batches differ from run to run: some slack);
    # work over the whole run once an event or a batch makes it about four times as much
    assert lines_large < 2 * lines_small, f"{lines_small:.0f} -> {lines_large:.0f} lines an event"
    assert bytes_large < 2 * bytes_small, (
        f"{bytes_small:.0f} -> {bytes_large:.0f} snapshot bytes an event"
    )
