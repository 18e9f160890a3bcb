"""`milepost verify` as a user runs it: the short version on SQLite and on PostgreSQL
passes, and against an installation that skips the fence it fails (the suite can fail)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from milepost.verify import checks
from tests.acceptance.harness import database
from tests.shared import clean_env

pytestmark = pytest.mark.slow

MILEPOST = str(Path(sys.executable).with_name("milepost"))
SHORT = ("--runs", "4", "--seed", "1", "--duration", "12", "--deadline", "40")


def verify(db_url: str, tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # wide enough for the tables not to wrap the invariants' names
    return subprocess.run(
        [MILEPOST, "verify", "--db", db_url, *SHORT, "--keep", str(tmp / "run")],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(**{"COLUMNS": "160", **env}),
    )


def rows(output: str) -> dict[str, str]:
    """The cells of the tables' rows: first column -> second."""
    found = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 2:
            found[cells[0]] = cells[1]
    return found


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_short_suite_passes(kind: str, tmp_path: Path) -> None:
    with database(kind, tmp_path) as db_url:
        proc = verify(db_url, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = rows(proc.stdout)
    assert {name: table.get(name) for name, _ in checks.CHECKS} == {
        name: "held" for name, _ in checks.CHECKS
    }
    assert table["orders"] == "4" and int(table["completed"]) + int(table["failed"]) >= 4
    assert sum(int(v) for k, v in table.items() if k.startswith("faults: ")) >= 2
    assert table["zombie reports fenced"] == table.get("faults: zombie", "0")
    assert int(table["acknowledged events"]) > 0  # the journals are not empty: checked
    assert "verify passed: seed 1 (replay: milepost verify --seed 1 --runs 4" in proc.stdout


def test_an_installation_that_skips_the_fence_fails_the_suite(tmp_path: Path) -> None:
    with database("sqlite", tmp_path) as db_url:
        proc = verify(db_url, tmp_path, MILEPOST_FAULT_SKIP_FENCE="1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    table = rows(proc.stdout)
    assert table["reports fenced by their claim's epoch"].endswith("violation(s)"), proc.stdout
    assert "verify FAILED: seed 1" in proc.stdout
