"""`milepost bench NEIGHBOURS` (BENCHMARKS.md, session 22) runs and reports each rep."""

from __future__ import annotations

import json

import pytest

from milepost import bench


def test_neighbours_times_the_loop_alone_then_beside_the_naps(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench, "NAP_S", 0)
    monkeypatch.setattr(bench, "NAPS", 2)
    summary = bench.neighbours(5, reps=2)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["rep"] for line in lines] == [1, 2]
    assert all(line["pair_s"] >= line["pair_loop_s"] > 0 for line in lines)
    assert summary["summary"] and summary["naps"] == "2 x 0s"
    assert summary["pair_s"]["median"] > 0 and summary["pair_over_alone_median"] > 0
