"""Retry from the browser on a run still going (the web UI's step panel, issue 14): a step
failed and waits an hour for its next attempt; an operator fixes the cause, clicks Retry,
and the attempt runs now, the run completing live on the page (the server's side of the
action is `tests/acceptance/test_actions_server.py`)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from tests.acceptance.harness import Cluster
from tests.e2e.test_web_ui import WAIT_MS, expect, needs_browser, pytestmark, sign_in  # noqa: F401

WAITS_AN_HOUR = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: ui_retry_live, path: e2e/ui_retry_live}
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
        next: flaky
      - step: flaky
        spec: {retry: {max_attempts: 3, delay: 3600, retry_on: [exception]}}
        tool:
          kind: python
          code: |
            import os
            if not os.path.exists("DIR/fixed"):
                raise ValueError("the input file is missing")
            result = 2
        next: end
      - step: end
        tool: {kind: python, code: "result = 3"}
    """)


@needs_browser
def test_a_failed_attempt_waiting_for_its_retry_is_retried_now_from_the_step_panel(
    cluster: Cluster, browser: Any, tmp_path: Path, artifacts: Path
) -> None:
    xid = cluster.run(WAITS_AN_HOUR.replace("DIR", str(tmp_path)))
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    sign_in(page, cluster.url, cluster.admin_token)
    page.goto(f"{cluster.url}/ui/runs/{xid}")
    page.get_by_test_id("step-flaky").click()
    panel = page.get_by_test_id("step-panel")
    # the first attempt's failure arrives live; the next one is an hour away
    expect(panel.get_by_test_id("attempt-row")).to_have_count(1, timeout=WAIT_MS)
    expect(panel.get_by_test_id("attempt-row")).to_have_attribute(
        "data-status", "FAILED", timeout=WAIT_MS
    )
    expect(page.get_by_test_id("run-status")).to_have_text("RUNNING")
    expect(panel.get_by_test_id("restart")).to_have_count(0)  # the run goes on: no new run
    page.screenshot(path=str(artifacts / "step-panel-retry-waiting.png"))

    (tmp_path / "fixed").write_text("")
    panel.get_by_test_id("retry").click()
    expect(page.get_by_test_id("run-status")).to_have_text("COMPLETED", timeout=WAIT_MS)
    assert page.url.endswith(f"/ui/runs/{xid}")  # the same run, moved on
    expect(page.get_by_test_id("step-flaky")).to_have_attribute("data-status", "COMPLETED")
    expect(page.get_by_test_id("step-end")).to_have_attribute("data-status", "COMPLETED")
    page.get_by_test_id("step-flaky").click()
    expect(panel.get_by_test_id("attempt-row")).to_have_count(2)
    expect(page.get_by_test_id("step-result")).to_have_text("2")
    page.screenshot(path=str(artifacts / "step-panel-retried-live.png"))
