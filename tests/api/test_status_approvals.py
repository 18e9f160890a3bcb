"""`milepost status --server` of a run waiting for an approval: the server's summary
carries each gated step's approval, and the CLI shows it as it does locally."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.api.support import live_server, playbook

GATED = playbook(
    "tests/gated",
    """
workflow:
  - step: pay
    tool: {kind: python, code: "result = 'paid'"}
    spec: {approval: {approvers: [role:finance], quorum: 2, expires_in: 2h, risk: low}}
""",
)


def test_status_through_a_server_shows_the_pending_approval(db_url: str) -> None:
    with live_server(db_url) as server:
        xid = server.execute(GATED)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MILEPOST_")}
        env["MILEPOST_TOKEN"] = server.tokens["viewer"]

        def status(*extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "milepost.cli",
                    "status",
                    xid,
                    "--server",
                    server.url,
                    *extra,
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )

        shown = status()
        data = json.loads(status("--json").stdout)
    assert shown.returncode == 0, shown.stderr
    approval = data["steps"]["pay"]["approval"]
    assert data["steps"]["pay"]["status"] == "AWAITING_APPROVAL"
    assert (approval["status"], approval["risk"], approval["quorum"], approval["approved"]) == (
        "pending",
        "low",
        2,
        0,
    )
    assert approval["approvers"] == ["role:finance"] and approval["outcome"] is None
    line = (
        f"approval {approval['approval_id']} (step pay): pending · risk low · votes 0/2 · "
        "who may decide: role:finance · time left: 1h 59m"
    )
    assert line in shown.stdout
