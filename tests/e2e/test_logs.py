"""`milepost logs` on the local database, as a user runs it after `milepost run`: what the
steps printed (stdout, stderr, the traceback naming the step's line), per step, as JSON;
the reason of `milepost status` names that line; an unknown run is an error, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.e2e.test_cli import cli, run_json

FAILS = """
keychain:
  - {name: api, kind: static, map: {token: tok-9f8e7d6c5b4a}}
workflow:
  - step: start
    tool: {kind: shell, command: "echo listing; ls /no/such/dir || true"}
    next: [{step: compute}]
  - step: compute
    tool:
      kind: python
      input: {token: "{{ keychain.api.token }}"}
      code: |
        print("calling with", token)
        rows = []
        total = rows[0]
"""


def test_logs_show_what_a_local_run_printed(tmp_path: Path) -> None:
    code, data = run_json(tmp_path, FAILS)
    assert code == 1 and data["status"] == "FAILED", data
    xid, db = data["execution_id"], tmp_path / "m.db"
    shown = cli("logs", xid, db=db)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "==> start (attempt 1) stdout <==\nlisting\n" in text
    assert "==> start (attempt 1) stderr <==\nls: " in text
    assert "==> compute (attempt 1) stdout <==\ncalling with ***\n" in text
    assert "tok-9f8e7d6c5b4a" not in text
    assert 'File "<step compute>", line 3, in <module>\n    total = rows[0]' in text
    assert text.rstrip().endswith("IndexError: list index out of range")
    only = cli("logs", xid, "--step", "compute", "--json", "--follow", db=db)  # ended: no wait
    assert only.returncode == 0, only.stderr
    entries = [json.loads(line) for line in only.stdout.splitlines()]
    assert [e["stream"] for e in entries] == ["stdout", "traceback"]
    # --output as on every read command: one document of every entry; --json stays lines
    every = [json.loads(line) for line in cli("logs", xid, "--json", db=db).stdout.splitlines()]
    assert len(every) == 4 and entries == [e for e in every if e["step"] == "compute"]
    as_json = cli("logs", xid, "--output", "json", db=db)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == every
    assert yaml.safe_load(cli("logs", xid, "-o", "yaml", db=db).stdout) == every
    followed = cli("logs", xid, "-f", "-o", "yaml", db=db)  # followed: an item at a time
    assert yaml.safe_load(followed.stdout) == every
    nothing = cli("logs", xid, "--step", "nosuch", "-o", "json", db=db)
    assert nothing.returncode == 0 and json.loads(nothing.stdout) == []
    status = cli("status", xid, db=db)
    assert "IndexError: list index out of range (line 3: total = rows[0])" in status.stdout


def test_logs_of_an_unknown_run_is_an_error(tmp_path: Path) -> None:
    run_json(tmp_path, "workflow:\n  - step: start\n    tool: {kind: noop}\n")
    proc = cli("logs", "12345", db=tmp_path / "m.db")
    assert proc.returncode == 2 and "no execution 12345" in proc.stderr
    assert "Traceback" not in proc.stderr
