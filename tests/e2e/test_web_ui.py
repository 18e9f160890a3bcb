"""The web UI in headless Chromium (Debian's `chromium`, driven by Playwright through
`executable_path`; never `playwright install`): a server and a worker, a run with a loop
watched live from the runs list to its run page, and a viewer offered no cancel button.

Screenshots of each page are saved as artifacts: under `MILEPOST_TEST_ARTIFACTS` if set
(CI points it at its output folder), else in the test's tmp dir; the path is printed."""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from milepost.api.routers import ui
from tests.acceptance.harness import Cluster, database
from tests.shared import IN_CI

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WAIT_MS = 30_000

try:
    from playwright.sync_api import Page, expect, sync_playwright
except ImportError:  # pragma: no cover - the dev extra has it
    sync_playwright = None  # type: ignore[assignment]

_missing = (
    "playwright is not installed (pip install -e '.[dev]')"
    if sync_playwright is None
    else f"no chromium at {CHROMIUM} (make browser, or apt-get install chromium)"
    if not os.path.exists(CHROMIUM)
    else "the web UI is not built (make install)"
    if not (ui.DIST / "index.html").is_file()
    else None
)
if _missing and IN_CI:
    raise RuntimeError(f"CI runs the browser tests: {_missing}")
needs_browser = pytest.mark.skipif(_missing is not None, reason=_missing or "")

LOOP = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: ui_loop, path: e2e/ui_loop}
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
        next: each
      - step: each
        loop: {in: [1, 2, 3, 4], iterator: n, mode: parallel, max_in_flight: 2}
        tool:
          kind: python
          input: {n: "{{ n }}"}
          code: |
            import os, time
            while not os.path.exists("DIR/go"):
                time.sleep(0.05)
            result = n
        next: end
      - step: end
        tool: {kind: python, code: "result = 2"}
    """)


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    root = os.environ.get("MILEPOST_TEST_ARTIFACTS")
    folder = Path(root) / "web_ui" if root else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"web UI screenshots: {folder}")
    return folder


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with database("sqlite", tmp_path) as url:
        c = Cluster(url, tmp_path)
        try:
            c.start_server()
            c.start_worker(concurrency=4, python_workers=2)
            yield c
        finally:
            (tmp_path / "go").write_text("")  # no tool is left waiting
            c.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    assert sync_playwright is not None
    with sync_playwright() as pw:
        launched = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            launched.close()


def sign_in(page: Page, url: str, token: str) -> None:
    page.goto(url + "/")  # the root redirects to /ui/
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=WAIT_MS)


@needs_browser
def test_a_run_seen_live_from_the_list_to_its_graph_and_a_viewer_cannot_cancel(
    cluster: Cluster, browser: Any, tmp_path: Path, artifacts: Path
) -> None:
    xid = cluster.run(LOOP.replace("DIR", str(tmp_path)))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(cluster.url + "/ui/")
    page.screenshot(path=str(artifacts / "sign-in.png"))
    sign_in(page, cluster.url, cluster.admin_token)

    row = page.locator(f"[data-testid=run-row]:has-text('{xid}')")
    expect(row).to_be_visible(timeout=WAIT_MS)
    expect(row).to_have_attribute("data-status", "RUNNING")
    page.screenshot(path=str(artifacts / "runs.png"))

    row.get_by_role("link", name=xid).click()
    expect(page).to_have_url(f"{cluster.url}/ui/runs/{xid}")
    each = page.get_by_test_id("step-each")
    expect(each).to_have_attribute("data-status", "RUNNING", timeout=WAIT_MS)
    expect(page.get_by_test_id("iterations-each")).to_contain_text("2 running", timeout=WAIT_MS)
    expect(page.get_by_test_id("step-start")).to_have_attribute("data-status", "COMPLETED")
    expect(page.get_by_test_id("step-end")).to_have_attribute("data-status", "PENDING")
    expect(page.get_by_test_id("cancel")).to_be_visible()  # an admin may cancel
    expect(page.get_by_test_id("event-row").first).to_be_visible()
    page.screenshot(path=str(artifacts / "run-running.png"))

    (tmp_path / "go").write_text("")  # the loop's tools finish; the page sees it live
    expect(each).to_have_attribute("data-status", "COMPLETED", timeout=WAIT_MS)
    expect(page.get_by_test_id("iterations-each")).to_contain_text("4 done")
    expect(page.get_by_test_id("step-end")).to_have_attribute(
        "data-status", "COMPLETED", timeout=WAIT_MS
    )
    expect(page.get_by_test_id("run-status")).to_have_text("COMPLETED", timeout=WAIT_MS)
    expect(page.get_by_test_id("cancel")).to_have_count(0)  # an ended run is not cancelled
    page.screenshot(path=str(artifacts / "run-completed.png"))

    # the list's filters are the server's: by status, by playbook; the search opens a run
    page.goto(cluster.url + "/ui/runs")
    page.select_option("select[name=status]", "FAILED")
    expect(page.get_by_text("No runs match.")).to_be_visible(timeout=WAIT_MS)
    page.select_option("select[name=status]", "COMPLETED")
    expect(row).to_have_attribute("data-status", "COMPLETED", timeout=WAIT_MS)
    page.fill("input[name=playbook]", "e2e/other")
    expect(page.get_by_text("No runs match.")).to_be_visible(timeout=WAIT_MS)
    page.fill("input[name=run-id]", xid)
    page.get_by_role("button", name="Open").click()
    expect(page).to_have_url(f"{cluster.url}/ui/runs/{xid}", timeout=WAIT_MS)

    # a viewer, on another run that is still going: no cancel button
    (tmp_path / "go").unlink()
    other = cluster.run(LOOP.replace("DIR", str(tmp_path)))
    viewer = browser.new_page(viewport={"width": 1280, "height": 900})
    sign_in(viewer, cluster.url, cluster.token("viewer"))
    expect(viewer.get_by_test_id("whoami")).to_contain_text("viewer")
    viewer.goto(f"{cluster.url}/ui/runs/{other}")  # a client route, served the app
    expect(viewer.get_by_test_id("step-start")).to_be_visible(timeout=WAIT_MS)
    expect(viewer.get_by_test_id("run-status")).to_have_text("RUNNING")
    expect(viewer.get_by_test_id("cancel")).to_have_count(0)
    viewer.screenshot(path=str(artifacts / "run-viewer.png"))


FAILS_ONCE = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: ui_fails_once, path: e2e/ui_fails_once}
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
        next: boom
      - step: boom
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


GATED = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: ui_gated, path: e2e/ui_gated}
    workload: {amount: 1200}
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
        next: refund
      - step: refund
        tool:
          kind: python
          input: {amount: "{{ workload.amount }}", order: A-1042}
          code: "result = {'refunded': amount}"
        spec:
          approval: {approvers: [user:alice], quorum: 1, expires_in: 1h, risk: high}
        next: end
      - step: end
        tool: {kind: python, code: "result = 2"}
    """)


QUICK = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: ui_quick, path: e2e/ui_quick}
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
    """)


@needs_browser
def test_a_failed_step_is_opened_read_and_retried_until_the_run_completes(
    cluster: Cluster, browser: Any, tmp_path: Path, artifacts: Path
) -> None:
    xid = cluster.run(FAILS_ONCE.replace("DIR", str(tmp_path)))
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    sign_in(page, cluster.url, cluster.admin_token)
    page.goto(f"{cluster.url}/ui/runs/{xid}")
    expect(page.get_by_test_id("run-status")).to_have_text("FAILED", timeout=WAIT_MS)
    expect(page.get_by_test_id("diagnosis")).to_contain_text("the input file is missing")

    boom = page.get_by_test_id("step-boom")
    expect(boom).to_have_attribute("data-status", "FAILED")
    boom.click()
    panel = page.get_by_test_id("step-panel")
    expect(panel.get_by_test_id("step-error")).to_contain_text("the input file is missing")
    expect(panel.get_by_test_id("step-error-line")).to_contain_text(
        'line 3: raise ValueError("the input file is missing")'
    )
    expect(panel.get_by_test_id("attempt-row")).to_have_count(1)
    expect(panel.get_by_test_id("attempt-row")).to_have_attribute("data-status", "FAILED")
    expect(panel.get_by_test_id("step-logs")).to_contain_text("ValueError")  # the traceback
    expect(panel.get_by_test_id("retry")).to_have_count(0)  # an ended run is not moved again
    page.screenshot(path=str(artifacts / "step-panel-failed.png"))

    (tmp_path / "fixed").write_text("")  # the operator fixes the cause, then retries
    panel.get_by_test_id("restart").click()
    expect(page).not_to_have_url(f"{cluster.url}/ui/runs/{xid}", timeout=WAIT_MS)
    retried = page.url.rsplit("/", 1)[1]
    assert retried.isdigit() and retried != xid
    expect(page.get_by_test_id("run-status")).to_have_text("COMPLETED", timeout=WAIT_MS)
    expect(page.get_by_test_id("step-boom")).to_have_attribute("data-status", "COMPLETED")
    expect(page.get_by_test_id("step-end")).to_have_attribute("data-status", "COMPLETED")
    expect(page.get_by_test_id("diagnosis")).to_have_count(0)
    page.get_by_test_id("step-boom").click()
    expect(page.get_by_test_id("step-result")).to_have_text("2")
    page.screenshot(path=str(artifacts / "step-panel-retried.png"))


@needs_browser
def test_an_approval_decided_in_the_browser_and_the_playbooks_and_workers_pages(
    cluster: Cluster, browser: Any, artifacts: Path
) -> None:
    xid = cluster.run(GATED)  # started by the admin; alice (an approver) may decide
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sign_in(page, cluster.url, cluster.token("approver", user="alice"))

    page.get_by_role("link", name="Approvals").click()
    expect(page).to_have_url(f"{cluster.url}/ui/approvals")
    card = page.locator(f"[data-testid=approval]:has-text('run {xid}')")
    expect(card).to_be_visible(timeout=WAIT_MS)
    expect(card.get_by_test_id("preview")).to_contain_text("A-1042", timeout=WAIT_MS)
    expect(card.get_by_test_id("risk")).to_have_text("high risk")
    expect(card.get_by_test_id("approvers")).to_contain_text("user:alice")
    expect(card.get_by_test_id("votes")).to_contain_text("0 of 1 approvals")
    expect(card.get_by_test_id("time-left")).to_have_text(re.compile(r"^59 min \d+ s left$"))
    page.screenshot(path=str(artifacts / "approvals.png"))

    card.get_by_placeholder("reason").fill("checked the order")
    card.get_by_role("button", name="Approve").click()
    expect(card).to_have_count(0, timeout=WAIT_MS)  # granted: no longer pending
    page.get_by_role("tab", name="History").click()
    decided = page.locator(f"[data-testid=history-row]:has-text('run {xid}')")
    expect(decided).to_have_attribute("data-status", "granted", timeout=WAIT_MS)
    page.screenshot(path=str(artifacts / "approvals-history.png"))
    decided.get_by_role("link", name=f"run {xid}").click()
    expect(page.get_by_test_id("run-status")).to_have_text("COMPLETED", timeout=WAIT_MS)
    [item] = cluster.client.approvals(execution_id=xid)["items"]
    [vote] = cluster.client.approval(item["approval_id"])["votes"]
    assert (item["status"], vote["identity"], vote["reason"]) == (
        "granted",
        "user:alice",
        "checked the order",
    )  # the click cast alice's vote, with why

    page.get_by_role("link", name="Playbooks").click()
    entry = page.locator("[data-testid=catalog-entry][data-path='e2e/ui_gated']")
    expect(entry).to_be_visible(timeout=WAIT_MS)
    entry.get_by_role("button", name="v1").click()
    expect(page.get_by_test_id("validity")).to_have_text("valid", timeout=WAIT_MS)
    expect(page.locator(".yaml-line[data-line='3']")).to_contain_text("path: e2e/ui_gated")
    page.screenshot(path=str(artifacts / "playbooks.png"))
    # a draft with a step that does not exist: the server's problem is marked on its line
    page.get_by_role("button", name="Edit a draft").click()
    page.fill("textarea[name=draft]", GATED.replace("next: end", "next: nowhere"))
    page.get_by_role("button", name="Check").click()
    line = next(n for n, text in enumerate(GATED.splitlines(), 1) if "next: end" in text)
    problem = page.locator(f"[data-testid=problem][data-line='{line}']")
    expect(problem).to_contain_text("unknown step 'nowhere'", timeout=WAIT_MS)
    expect(page.get_by_test_id("validity")).to_have_text("1 problem(s)")
    page.screenshot(path=str(artifacts / "playbooks-problem.png"))

    page.get_by_role("link", name="Workers").click()
    worker = page.locator("[data-testid=worker-row][data-status=live]")
    expect(worker.first).to_be_visible(timeout=WAIT_MS)
    expect(worker.first).to_contain_text("default")
    expect(page.get_by_test_id("without-worker")).to_have_count(0)
    page.screenshot(path=str(artifacts / "workers.png"))


@needs_browser
def test_a_waiting_run_selected_in_the_list_and_cancelled_turns_cancelled_live(
    cluster: Cluster, browser: Any, tmp_path: Path, artifacts: Path
) -> None:
    done = cluster.run(QUICK)
    waiting = cluster.run(LOOP.replace("DIR", str(tmp_path)))  # held by the file gate
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sign_in(page, cluster.url, cluster.admin_token)
    held = page.locator(f"[data-testid=run-row][data-id='{waiting}']")
    quick = page.locator(f"[data-testid=run-row][data-id='{done}']")
    expect(quick).to_have_attribute("data-status", "COMPLETED", timeout=WAIT_MS)
    expect(held).to_have_attribute("data-status", "RUNNING", timeout=WAIT_MS)
    expect(held).to_contain_text("token:")  # who started it, from the list's row

    held.get_by_role("checkbox").check()
    page.get_by_role("button", name="Cancel selected").click()
    results = page.get_by_test_id("bulk-results")
    expect(results).to_contain_text(f"{waiting}: cancel asked", timeout=WAIT_MS)
    # the stream brings the end: no reload, no filter change
    expect(held).to_have_attribute("data-status", "CANCELLED", timeout=WAIT_MS)
    expect(quick).to_have_attribute("data-status", "COMPLETED")
    page.screenshot(path=str(artifacts / "runs-bulk-cancelled.png"))
