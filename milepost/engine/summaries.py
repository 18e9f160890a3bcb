"""Summaries of an execution for people and scripts: `milepost status`/`run` output, the
API's summary view and the conformance checks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from milepost.core import approval_state as ap
from milepost.core import compensation_state as cs
from milepost.core import state as st
from milepost.core import teardown_state as td
from milepost.engine import worker_pools


def execution_summary(state: st.ExecutionState) -> dict[str, Any]:
    """`{execution_id, status, compensating, tearing_down, error, steps: {name: {status,
    result, runs}}}`; a gated step also has its latest `approval` (`approval_summary`); a
    run that compensated has `compensation` (`compensation_state.summary`, DSL 10.5), one
    that tore down `teardown` (`teardown_state.summary`: a teardown step is also among
    the steps, with its own status); a run whose
    tools reported usage has `usage` (`core.usage.summary`), and so have its steps that
    did (DSL 10.6)."""
    latest: dict[str, ap.Approval] = {}
    for approval in sorted(state.approvals.values(), key=lambda a: a.approval_id):
        latest[approval.step] = approval
    steps: dict[str, Any] = {}
    for name, status in state.step_status.items():
        steps[name] = {
            "status": status,
            "result": _plain(state.results.get(name)),
            "runs": state.run_counts.get(name, 0),
        }
        if name in latest:
            steps[name]["approval"] = approval_summary(state, latest[name])
        if name in state.step_usage:
            steps[name]["usage"] = state.step_usage[name].summary()
    error = state.error
    if state.status != st.FAILED:
        error = None
    summary: dict[str, Any] = {
        "execution_id": str(state.execution_id),
        "playbook": state.path,
        "status": state.status,
        "compensating": cs.compensating(state) and not state.terminal,
        "tearing_down": td.tearing_down(state),
        "error": error,
        "steps": steps,
    }
    if state.restarted_from is not None:  # a restart's new run names the run it restarts
        summary["restarted_from"] = str(state.restarted_from)
    if state.usage.by:  # DSL 10.6: only a run whose tools reported usage shows it
        summary["usage"] = state.usage.summary()
    compensation = cs.summary(state)
    if compensation is not None:
        compensation["items"] = _plain(compensation["items"])
        summary["compensation"] = compensation
    torn = td.summary(state)
    if torn is not None:
        torn["items"] = _plain(torn["items"])
        summary["teardown"] = torn
    return summary


def approval_summary(state: st.ExecutionState, approval: ap.Approval) -> dict[str, Any]:
    """`{approval_id, status, risk, approvers, quorum, approved, votes, expires_at, outcome}`:
    times as ISO-8601, `outcome` how a closed approval closed (None while pending)."""
    return {
        "approval_id": str(approval.approval_id),
        "status": approval.status,
        "risk": approval.risk,
        "approvers": list(approval.approvers),
        "quorum": approval.quorum,
        "approved": len(approval.approvals),
        "votes": [
            {"identity": v.identity, "decision": v.decision, "reason": v.reason, "at": iso(v.at)}
            for v in approval.votes
        ],
        "expires_at": iso(approval.expires_at),
        "outcome": _outcome(state, approval),
    }


def _outcome(state: st.ExecutionState, approval: ap.Approval) -> str | None:
    if approval.status == ap.PENDING:
        return None
    if approval.status == ap.GRANTED:
        return "granted by " + ", ".join(v.identity for v in approval.approvals)
    denial = approval.denial
    if approval.status == ap.DENIED and denial is not None:
        return f"denied by {denial.identity}" + (f": {denial.reason}" if denial.reason else "")
    for error in (state.failure, state.error):
        # the step's failure says why it was invalidated or expired, in the message people read
        if error and error.get("step") == approval.step and error.get("kind") == "approval":
            return str(error.get("message"))
    return approval.status


def iso(ts: float | None) -> str | None:
    """ISO-8601 UTC with milliseconds, as the API writes times."""
    return (
        None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    )


def _plain(value: Any) -> Any:
    """Loop results are list subclasses; JSON writers handle them, but be explicit."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def failure_reason(state: st.ExecutionState) -> str | None:
    """Why a failed execution failed, in one line; None when it has no error."""
    return None if state.error is None else error_reason(state.error)


def error_reason(error: dict[str, Any]) -> str:
    """An execution's error in one line: its reason, and the line of a python step's code
    its exception left last."""
    reason = str(error.get("reason") or error.get("message") or "failed")
    if error.get("line") is not None:
        reason += f" (line {error['line']}: {error.get('code_line') or ''})"
    return reason


def with_missing_workers(
    summary: dict[str, Any], missing: list[worker_pools.Missing]
) -> dict[str, Any]:
    """`summary` with `no_live_worker` (`[{pool, commands, steps, message}]`, DSL 10.6) and,
    on each step concerned, `waiting: "no live worker of pool P"`; unchanged without any."""
    if not missing:
        return summary
    steps = {name: dict(step) for name, step in summary["steps"].items()}
    for entry in missing:
        for name in entry.steps:
            if name in steps:
                steps[name]["waiting"] = entry.message
    return {**summary, "steps": steps, "no_live_worker": [m.as_dict() for m in missing]}
