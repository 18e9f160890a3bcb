"""The checks of an entry's `expect` against what its run produced, in the README's order,
each failing one a reason; `db_checks` query the test database."""

from __future__ import annotations

import importlib
import re
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from milepost.conformance.matching import match
from milepost.conformance.results import one_line
from milepost.conformance.services import Services, redact, substitute
from milepost.conformance.targets import Run
from milepost.core import state as st


def check(expect: dict[str, Any], run: Run, services: Services, xid: int | None) -> list[str]:
    """Every failing check of `expect` against `run`, in README order."""
    status: str
    reason: str | None
    steps: dict[str, Any]
    if run.rejected is not None:
        status, reason, steps = st.FAILED, run.rejected, {}
    else:
        assert run.summary is not None
        status, reason, steps = run.summary["status"], run.reason, run.summary["steps"]
    reasons: list[str] = []

    wanted = expect["status"]
    allowed = [str(s).upper() for s in (wanted if isinstance(wanted, list) else [wanted])]
    if status not in allowed:
        why = f" ({one_line(reason)})" if reason else ""
        reasons.append(f"status: expected {' or '.join(allowed)}, got {status}{why}")

    def with_status(*statuses: str) -> set[str]:
        return {n for n, s in steps.items() if s["status"] in statuses}

    completed = with_status(st.COMPLETED)
    reasons += _check_steps(expect, steps, completed, with_status(st.FAILED))
    for step, want in (expect.get("run_counts") or {}).items():
        got = steps.get(step, {}).get("runs", 0)
        if got != want:
            reasons.append(f"run_counts: step {step} ran {got} time(s), expected {want}")
    for step, want in (expect.get("results") or {}).items():
        if step not in steps or steps[step]["status"] not in (st.COMPLETED, st.FAILED):
            state_text = steps[step]["status"] if step in steps else "did not run"
            reasons.append(f"results: step {step} has no result ({state_text})")
            continue
        reasons += [f"results: {m}" for m in match(want, steps[step]["result"], step)]
    if "error_matches" in expect and status == st.FAILED:
        pattern = str(expect["error_matches"])
        if reason is None or re.search(pattern, reason) is None:
            reasons.append(
                f"error_matches: /{pattern}/ not found in failure reason "
                f"{one_line(reason) if reason else '(none)'}"
            )
    if "child_executions" in expect:
        if run.children is None:
            reasons.append("child_executions check not supported yet")
        elif run.children != expect["child_executions"]:
            reasons.append(
                f"child_executions: expected {expect['child_executions']}, got {run.children}"
            )
    if expect.get("db_checks"):
        reasons += _db_checks(expect["db_checks"], services, xid)
    return reasons


def _check_steps(
    expect: dict[str, Any], steps: dict[str, Any], completed: set[str], failed: set[str]
) -> list[str]:
    reasons: list[str] = []

    def status_of(step: str) -> str:
        return str(steps[step]["status"]) if step in steps else "not run"

    if "steps_run" in expect:
        want = set(expect["steps_run"] or [])
        missing, extra = sorted(want - completed), sorted(completed - want)
        if missing or extra:
            parts = [f"{s} did not complete ({status_of(s)})" for s in missing]
            parts += [f"{s} completed but was not expected" for s in extra]
            reasons.append(f"steps_run: {', '.join(parts)}")
    for step in expect.get("steps_include") or []:
        if step not in completed:
            reasons.append(f"steps_include: {step} did not complete ({status_of(step)})")
    for step in expect.get("steps_not_run") or []:
        if step in completed or step in failed:
            reasons.append(f"steps_not_run: {step} ran ({status_of(step)})")
    for step in expect.get("steps_failed") or []:
        if step not in failed:
            reasons.append(f"steps_failed: {step} did not fail ({status_of(step)})")
    for group in expect.get("one_of") or []:
        ran = [s for s in group if s in completed]
        if len(ran) != 1:
            reasons.append(
                f"one_of: expected exactly one of {', '.join(group)} to complete, "
                f"got {len(ran)}{': ' + ', '.join(ran) if ran else ''}"
            )
    return reasons


def _db_checks(checks: list[dict[str, Any]], services: Services, xid: int | None) -> list[str]:
    """Run each `sql` on the test database and subset-match its rows (a list of objects)."""
    if not services.postgres:
        return ["db_checks: no test database (postgres is not available)"]
    placeholders = {**services.placeholders, "EXECUTION_ID": "" if xid is None else str(xid)}
    try:
        psycopg = importlib.import_module("psycopg")
        rows_mod = importlib.import_module("psycopg.rows")
    except ImportError:
        return ["db_checks: psycopg is not installed"]
    reasons: list[str] = []
    try:
        with psycopg.connect(
            services.pg_url, connect_timeout=5, autocommit=True, row_factory=rows_mod.dict_row
        ) as conn:
            for i, check in enumerate(substitute(checks, placeholders)):
                try:
                    rows = [_plain(r) for r in conn.execute(check["sql"]).fetchall()]
                except Exception as exc:
                    reasons.append(f"db_checks[{i}]: query failed: {one_line(str(exc))}")
                    continue
                reasons += [
                    f"db_checks: {m}" for m in match(check.get("rows", []), rows, f"db_checks[{i}]")
                ]
    except Exception as exc:
        reasons.append(
            f"db_checks: cannot connect to {redact(services.pg_url)}: {one_line(str(exc))}"
        )
    return reasons


def _plain(value: Any) -> Any:
    """Database values as JSON would carry them (Decimal -> int/float, dates -> ISO text)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Decimal):
        whole = value.is_finite() and value == value.to_integral_value()
        return int(value) if whole else float(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value
