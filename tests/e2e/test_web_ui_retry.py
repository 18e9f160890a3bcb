"""Retry from the browser on a run still going (the web UI's step panel, issue 14): a step
failed and waits an hour for its next attempt; an operator fixes the cause, clicks Retry,
and the attempt runs now, the run completing live on the page (the server's side of the
action is `tests/acceptance/test_actions_server.py`). While a retry waits (a `spec.retry`
timer, or a task policy's inside the attempt), the runs list, the run page and the step's
box say so, with the attempt and the error, and the failed try's traceback is readable
(issue 33, item 12)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

from tests.acceptance.harness import Cluster
from tests.e2e.test_web_ui import WAIT_MS, expect, needs_browser, pytestmark, sign_in  # noqa: F401
from tests.policy_wait import RAISES_THEN_WAITS

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
    waiting = page.get_by_test_id("wait")
    expect(waiting).to_have_attribute("data-kind", "retry", timeout=WAIT_MS)
    expect(waiting).to_contain_text(
        re.compile(r"step 'flaky' retrying in \dm \d\ds, attempt 2 of 3")
    )
    expect(waiting).to_contain_text("after: ValueError: the input file is missing")
    expect(page.get_by_test_id("wait-flaky")).to_contain_text("attempt 2 of 3")
    expect(panel.get_by_test_id("restart")).to_have_count(0)  # the run goes on: no new run
    page.screenshot(path=str(artifacts / "step-panel-retry-waiting.png"))

    (tmp_path / "fixed").write_text("")
    panel.get_by_test_id("retry").click()
    expect(page.get_by_test_id("run-status")).to_have_text("COMPLETED", timeout=WAIT_MS)
    assert page.url.endswith(f"/ui/runs/{xid}")  # the same run, moved on
    expect(page.get_by_test_id("step-flaky")).to_have_attribute("data-status", "COMPLETED")
    expect(page.get_by_test_id("step-end")).to_have_attribute("data-status", "COMPLETED")
    expect(page.get_by_test_id("wait")).to_have_count(0)
    page.get_by_test_id("step-flaky").click()
    expect(panel.get_by_test_id("attempt-row")).to_have_count(2)
    expect(page.get_by_test_id("step-result")).to_have_text("2")
    page.screenshot(path=str(artifacts / "step-panel-retried-live.png"))


@needs_browser
def test_a_policy_retry_waiting_inside_its_attempt_shows_in_the_list_the_run_page_and_its_logs(
    cluster: Cluster, browser: Any, artifacts: Path
) -> None:
    xid = cluster.run(RAISES_THEN_WAITS)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    sign_in(page, cluster.url, cluster.admin_token)
    row = page.locator(f"[data-testid=run-row][data-id='{xid}']")
    # the worker's note of the retry reaches the list live (the runs stream)
    shown = row.get_by_test_id("run-waiting")
    expect(shown).to_have_attribute("data-kind", "policy_retry", timeout=WAIT_MS)
    expect(shown).to_contain_text(re.compile(r"step 'flaky' retrying in 9m \d\ds, attempt 2 of 3"))
    expect(shown).to_contain_text("after: ValueError: the input file is missing")
    expect(row).to_have_attribute("data-status", "RUNNING")
    page.screenshot(path=str(artifacts / "runs-list-policy-retry.png"))

    page.goto(f"{cluster.url}/ui/runs/{xid}")
    expect(page.get_by_test_id("wait")).to_contain_text(
        re.compile(r"retrying in 9m \d\ds, attempt 2 of 3, after: ValueError: the input file")
    )
    expect(page.get_by_test_id("wait-flaky")).to_contain_text("attempt 2 of 3")
    page.get_by_test_id("step-flaky").click()
    panel = page.get_by_test_id("step-panel")
    expect(panel.get_by_test_id("attempt-row")).to_have_attribute("data-status", "RUNNING")
    logs = panel.get_by_test_id("step-logs")  # the failed try's output, while it waits
    expect(logs).to_contain_text("about to fail", timeout=WAIT_MS)
    expect(logs).to_contain_text("ValueError: the input file is missing")
    page.screenshot(path=str(artifacts / "run-page-policy-retry.png"))
    cluster.client.cancel(xid)
    expect(page.get_by_test_id("run-status")).to_have_text("CANCELLED", timeout=WAIT_MS)
    expect(page.get_by_test_id("wait")).to_have_count(0)
