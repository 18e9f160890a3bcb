"""Usage and budgets end to end in the embedded mode (DSL 10.6): `milepost run` and
`milepost status` as processes, a python step assigning `usage` and an http step against a
local server whose JSON reply reports it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.test_cli import cli, write
from tests.receiver import serve

AGENT = """
executor:
  spec:
    BUDGET
workflow:
  - step: start
    tool:
      kind: python
      code: |
        usage = {"input_tokens": 812, "output_tokens": 164, "cost": 0.0041,
                 "provider": "openai", "model": "gpt-x"}
        result = {"draft": "hello"}
    next: {arcs: [{step: review}]}
  - step: review
    tool:
      kind: http
      method: POST
      url: "{{ workload.url }}/review"
      body: {text: "{{ start.draft }}"}
"""

REVIEW = {
    "verdict": "fine",
    "usage": {
        "input_tokens": 100,
        "output_tokens": 20,
        "cost": 0.002,
        "provider": "anthropic",
        "model": "claude",
    },
}


def test_usage_is_summed_and_shown_by_run_and_status(tmp_path: Path) -> None:
    with serve() as api:
        api.reply = REVIEW
        pb = write(tmp_path, AGENT.replace("BUDGET", "timeout: 60"))
        proc = cli(
            "run",
            str(pb),
            "--json",
            "--payload",
            json.dumps({"url": api.url}),
            db=tmp_path / "m.db",
        )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["status"] == "COMPLETED"
    # the usage left the result data: the step's result is the reply without it
    assert summary["steps"]["review"]["result"]["data"] == {"verdict": "fine"}
    assert summary["steps"]["start"]["result"] == {"draft": "hello"}
    assert summary["usage"]["tokens"] == 812 + 164 + 120
    assert summary["usage"]["cost"] == 0.0061
    assert [(e["provider"], e["model"], e["tokens"]) for e in summary["usage"]["by"]] == [
        ("anthropic", "claude", 120),
        ("openai", "gpt-x", 976),
    ]
    assert summary["steps"]["start"]["usage"]["tokens"] == 976
    xid = summary["execution_id"]
    status = cli("status", xid, db=tmp_path / "m.db")
    assert status.returncode == 0, status.stderr
    assert (
        "usage: 1096 tokens (912 in, 184 out), cost 0.0061 · anthropic/claude 120 tokens"
        " 0.002 · openai/gpt-x 976 tokens 0.0041"
    ) in status.stdout
    assert "976 tokens, 0.0041" in status.stdout and "120 tokens, 0.002" in status.stdout
    events = cli("events", xid, "--json", db=tmp_path / "m.db")
    completed = [
        json.loads(line)
        for line in events.stdout.splitlines()
        if json.loads(line)["event_type"] == "command.completed"
    ]
    assert [e["result"]["context"]["usage"][0]["model"] for e in completed] == ["gpt-x", "claude"]


def test_a_budget_fails_the_run_at_the_next_step_boundary(tmp_path: Path) -> None:
    with serve() as api:
        api.reply = REVIEW
        pb = write(tmp_path, AGENT.replace("BUDGET", "budget: {cost: 0.004}"))
        proc = cli("run", str(pb), "--payload", json.dumps({"url": api.url}), db=tmp_path / "m.db")
        assert api.received == []  # the step after the boundary never ran
    assert proc.returncode == 1, proc.stderr
    reason = "budget exceeded: cost 0.0041 > 0.004 after step 'start'"
    assert f"reason: {reason}" in proc.stdout
    [listed] = json.loads(cli("list", "--json", db=tmp_path / "m.db").stdout)
    xid = listed["execution_id"]
    status = json.loads(cli("status", str(xid), "--json", db=tmp_path / "m.db").stdout)
    assert status["status"] == "FAILED"
    assert status["error"]["kind"] == "budget" and status["error"]["message"] == reason
    assert "review" not in status["steps"]


def test_milepost_usage_sums_per_playbook_from_the_local_database(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with serve() as api:
        api.reply = REVIEW
        pb = write(tmp_path, AGENT.replace("BUDGET", "timeout: 60"))
        for _ in range(2):
            proc = cli("run", str(pb), "--payload", json.dumps({"url": api.url}), db=db)
            assert proc.returncode == 0, proc.stderr
    listed = cli("usage", "--json", db=db)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["provider"], r["model"], r["tokens"], r["cost"]) for r in rows] == [
        ("anthropic", "claude", 240, 0.004),
        ("openai", "gpt-x", 1952, 0.0082),
    ]
    path = rows[0]["path"]
    table = cli("usage", "--playbook", path, db=db)
    assert table.returncode == 0, table.stderr
    assert "gpt-x" in table.stdout and "1952" in table.stdout and "0.0082" in table.stdout
    none = cli("usage", "--playbook", "no/such", db=db)
    assert none.returncode == 0 and "no usage reported for no/such" in none.stdout
