"""`milepost run`, `status`, `describe` and `doctor` of a run that tore down
(`executor.spec.teardown`), one of its teardown steps failing."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.compensation_saga import effects, saga
from tests.e2e.test_cli import cli


def test_a_failing_teardown_step_is_shown_everywhere_and_the_run_still_completes(
    tmp_path: Path,
) -> None:
    _, text = saga(tmp_path, teardown=True)
    path = tmp_path / "saga.yaml"
    path.write_text(text)
    db = tmp_path / "m.db"
    proc = cli("run", str(path), "--payload", '{"fail": ["cleanup"]}', db=db)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # COMPLETED: its status stands
    assert re.search(r"execution \d+ COMPLETED", proc.stdout), proc.stdout
    assert re.search(r"cleanup \(teardown\)\s+FAILED", proc.stdout), proc.stdout
    assert "teardown failed: cleanup (the run's status stays COMPLETED" in proc.stdout
    assert effects(tmp_path)[-1] == "notify COMPLETED"
    xid = re.search(r"execution (\d+)", proc.stdout).group(1)  # type: ignore[union-attr]
    status = json.loads(cli("status", xid, "--json", db=db).stdout)
    assert status["status"] == "COMPLETED" and status["tearing_down"] is False
    assert [(i["step"], i["status"]) for i in status["teardown"]["items"]] == [
        ("cleanup", "FAILED"),
        ("notify", "COMPLETED"),
    ]
    human = cli("status", xid, db=db).stdout
    assert re.search(r"teardown\s+.*status", human) and "teardown failed: cleanup" in human
    described = json.loads(cli("describe", xid, "--json", db=db).stdout)
    assert "cleanup refused" in described["steps"]["cleanup"]["error"]["message"]
    doctor = cli("doctor", xid, db=db).stdout
    assert "teardown step 'cleanup' failed" in doctor, doctor
