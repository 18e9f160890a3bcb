"""`python -m tests.engine_cpu` (BENCHMARKS.md's CPU a step) measures and leaves nothing
behind: its SQLite file went into a fresh temporary directory that no one removed, one per
run (a session of valgrind and interleaved rounds left over a hundred)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from tests import engine_cpu


def test_a_measurement_prints_its_figures_and_removes_its_database(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    asyncio.run(engine_cpu.measure("W1", 2, 1, None))
    assert capsys.readouterr().out.startswith("W1 2 x1: engine CPU ")
    assert list(tmp_path.iterdir()) == []
