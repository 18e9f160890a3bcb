"""`milepost run` and `milepost status` of a run that compensated (DSL 10.5)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.compensation_saga import REFUND, effects, saga
from tests.e2e.test_cli import cli


def test_run_and_status_show_each_compensation_and_its_outcome(tmp_path: Path) -> None:
    _, text = saga(tmp_path)
    path = tmp_path / "saga.yaml"
    path.write_text(text)
    db = tmp_path / "m.db"
    proc = cli("run", str(path), "--payload", '{"fail": ["ship", "release"]}', db=db)
    assert proc.returncode == 1, proc.stderr
    assert re.search(
        r"release \(undoes reserve\)\s+FAILED\s+RuntimeError: release refused", proc.stdout
    ), proc.stdout
    assert re.search(r"refund \(undoes start\)\s+COMPLETED", proc.stdout), proc.stdout
    assert effects(tmp_path)[-1] == REFUND
    xid = re.search(r"execution (\d+)", proc.stdout).group(1)  # type: ignore[union-attr]
    status = json.loads(cli("status", xid, "--json", db=db).stdout)
    assert status["status"] == "FAILED" and status["compensating"] is False
    assert [(i["compensation"], i["status"]) for i in status["compensation"]["items"]] == [
        ("release", "FAILED"),
        ("refund", "COMPLETED"),
    ]
    human = cli("status", xid, db=db).stdout
    assert "release" in human and "reserve (run 1)" in human


def test_describe_shows_the_compensation_steps_that_ran(tmp_path: Path) -> None:
    """Issue 33, item 13: `describe` left out the compensation steps that ran (they run
    outside the workflow's arcs, so the fold's step statuses never named them)."""
    _, text = saga(tmp_path)
    path = tmp_path / "saga.yaml"
    path.write_text(text)
    db = tmp_path / "m.db"
    proc = cli("run", str(path), "--payload", '{"fail": ["ship", "release"]}', db=db)
    xid = re.search(r"execution (\d+)", proc.stdout).group(1)  # type: ignore[union-attr]
    described = json.loads(cli("describe", xid, "--json", db=db).stdout)
    release, refund = described["steps"]["release"], described["steps"]["refund"]
    assert (release["status"], release["compensates"]) == ("FAILED", ["reserve"])
    assert release["error"]["message"] == "RuntimeError: release refused"
    assert (refund["status"], refund["compensates"]) == ("COMPLETED", ["start"])
    assert [a["status"] for a in refund["attempts"]] == ["COMPLETED"]
    assert refund["started_at"] and refund["ended_at"]
    human = cli("describe", xid, db=db).stdout
    assert re.search(r"refund\s+│\s+COMPLETED", human), human
    assert "compensation: undoes start" in human
