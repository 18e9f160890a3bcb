"""The NoETL conformance runner: run every entry of `expectations.yaml` and check it.

The format is in the suite's README (`shared/conformance/noetl/README.md`). `run_suite`
returns a `SuiteResult`; `main` prints one line per playbook as it finishes (or one JSON
object) and the closing `N passed, M failed, K skipped` line.

One SQLite store (a fresh file in a temporary directory) serves the whole suite; each entry
runs in its own `EmbeddedEngine` (own workers and tool runtime, so a hung or crashed entry
cannot leak work into the next one), in which every playbook of the suite is registered
first so sub-playbooks resolve by `metadata.path`. Entries run one at a time: the mock API
keeps global counters.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from milepost.client import MilepostClient
from milepost.conformance.checks import check
from milepost.conformance.results import (
    FAILED,
    PASSED,
    SKIPPED,
    EntryResult,
    SuiteError,
    SuiteResult,
    format_line,
)
from milepost.conformance.services import Services, services_for, substitute
from milepost.conformance.suite import Catalog, entry_problems, needs, read_expectations, select
from milepost.conformance.targets import EmbeddedTarget, Run, ServerTarget, Target
from milepost.core import state as st
from milepost.store.sqlite import SQLiteStore

__all__ = ["DEFAULT_PG_URL", "main", "run_suite"]

log = logging.getLogger(__name__)

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_TIMEOUT_S = 60.0


def run_suite(
    directory: str | Path,
    *,
    pg_url: str = DEFAULT_PG_URL,
    only: list[str] | None = None,
    progress: Callable[[EntryResult], None] | None = None,
    server: str | None = None,
    token: str | None = None,
) -> SuiteResult:
    """Run the entries of `directory/expectations.yaml` one at a time and check each.

    Args:
        directory: the suite folder (`expectations.yaml` and `playbooks/`).
        pg_url: the test database, for `postgres` entries, `${PG_*}` and `db_checks`.
        only: run only entries whose playbook path equals, glob-matches or has the stem
            of one of these; the others are left out of the result.
        progress: called with each entry's result as soon as it is known.
        server: run through this milepost server (its workers run the tools) instead of
            an embedded engine; `token` (else MILEPOST_TOKEN) authenticates.

    Raises:
        SuiteError: the suite cannot be read, or an `only` pattern selects nothing.
    """
    root = Path(directory)
    entries = select(read_expectations(root), only)
    catalog = Catalog.load(root / "playbooks")
    needed = {n for e in entries for n in needs(e)}
    with (
        services_for(needed, pg_url, engine_url=server) as services,
        tempfile.TemporaryDirectory(prefix="milepost-conformance-") as tmp,
    ):
        if server is not None:
            with MilepostClient(server, token) as client:
                target: Target = ServerTarget(catalog, client)
                return asyncio.run(_run_all(entries, root, catalog, services, target, progress))
        store = SQLiteStore(Path(tmp) / "conformance.db")
        try:
            target = EmbeddedTarget(catalog, store)
            return asyncio.run(_run_all(entries, root, catalog, services, target, progress))
        finally:
            store.close()


def main(
    directory: str | Path,
    *,
    pg_url: str = DEFAULT_PG_URL,
    json_out: bool = False,
    only: list[str] | None = None,
    server: str | None = None,
    token: str | None = None,
) -> int:
    """Run the suite and print it; 0 when nothing failed, 1 when an entry failed, 2 on error.

    Text mode prints one line per playbook as it finishes, then the closing line
    `N passed, M failed, K skipped`. With `json_out` stdout holds exactly one JSON object
    `{entries, passed, failed, skipped}` and the closing line goes to stderr.
    """

    def show(r: EntryResult) -> None:
        print(format_line(r), flush=True)

    try:
        result = run_suite(
            directory,
            pg_url=pg_url,
            only=only,
            server=server,
            token=token,
            progress=None if json_out else show,
        )
    except SuiteError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    if json_out:
        print(json.dumps(result.to_dict(), indent=2, default=str), flush=True)
        print(result.closing_line(), file=sys.stderr, flush=True)
    else:
        print(result.closing_line(), flush=True)
    if result.skipped and in_ci():
        # CI has every service: an entry skipped there is a service that did not start
        print(
            "error: under CI every entry must run; skipped entries fail the suite",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 1 if result.failed else 0


def in_ci() -> bool:
    """Whether this is CI (`CI=true`), where skipping is failing."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


async def _run_all(
    entries: list[dict[str, Any]],
    root: Path,
    catalog: Catalog,
    services: Services,
    target: Target,
    progress: Callable[[EntryResult], None] | None,
) -> SuiteResult:
    suite = SuiteResult()
    for entry in entries:
        started = time.perf_counter()
        try:
            result = await _run_entry(entry, root, catalog, services, target)
        except Exception as exc:  # a runner or engine bug fails this entry, not the suite
            log.exception("conformance entry crashed", extra={"playbook": entry["playbook"]})
            result = EntryResult(
                entry["playbook"], FAILED, [f"runner error: {type(exc).__name__}: {exc}"]
            )
        result.seconds = time.perf_counter() - started
        suite.entries.append(result)
        if progress is not None:
            progress(result)
    return suite


async def _run_entry(
    entry: dict[str, Any], root: Path, catalog: Catalog, services: Services, target: Target
) -> EntryResult:
    name = entry["playbook"]
    problems = entry_problems(entry, root, catalog)
    if problems:
        return EntryResult(name, FAILED, problems)
    missing = services.missing(needs(entry))
    if missing:
        return EntryResult(name, SKIPPED, missing)
    expect: dict[str, Any] = entry["expect"]
    workload = substitute(entry.get("workload") or {}, services.placeholders)
    credentials = substitute(entry.get("credentials") or {}, services.placeholders)
    timeout = float(entry.get("timeout_s") or DEFAULT_TIMEOUT_S)

    if name in catalog.rejected:
        run = Run(rejected=catalog.rejected[name].message)
        xid = None
    else:
        text, playbook = catalog.loaded[name]
        try:
            run, xid = await target.execute(text, playbook, workload, credentials, timeout)
        except Exception as exc:  # the engine failing on one entry fails that entry only
            log.exception("conformance run crashed", extra={"playbook": name})
            return EntryResult(name, FAILED, [f"engine error: {type(exc).__name__}: {exc}"])

    if run.timed_out:
        reasons = [f"timed out after {timeout:g}s; {_progress_text(run.summary)}"]
    else:
        reasons = check(expect, run, services, xid)
    return EntryResult(
        name, FAILED if reasons else PASSED, reasons, execution_id=None if xid is None else str(xid)
    )


def _progress_text(summary: dict[str, Any] | None) -> str:
    if not summary:
        return "no state"
    steps = summary["steps"]
    running = [n for n, s in steps.items() if s["status"] == st.RUNNING]
    done = [n for n, s in steps.items() if s["status"] == st.COMPLETED]
    return (
        f"status {summary['status']}, running: {', '.join(running) or 'none'}, "
        f"completed: {', '.join(done) or 'none'}"
    )
