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
