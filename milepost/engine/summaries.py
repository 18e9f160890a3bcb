"""Summaries of an execution for people and scripts: `milepost status`/`run` output, the
API's summary view and the conformance checks."""

from __future__ import annotations

from typing import Any

from milepost.core import state as st


def execution_summary(state: st.ExecutionState) -> dict[str, Any]:
    """`{execution_id, status, error, steps: {name: {status, result, runs}}}`."""
    steps: dict[str, Any] = {}
    for name, status in state.step_status.items():
        steps[name] = {
            "status": status,
            "result": _plain(state.results.get(name)),
            "runs": state.run_counts.get(name, 0),
        }
    error = state.error
    if state.status != st.FAILED:
        error = None
    return {
        "execution_id": str(state.execution_id),
        "playbook": state.path,
        "status": state.status,
        "error": error,
        "steps": steps,
    }


def _plain(value: Any) -> Any:
    """Loop results are list subclasses; JSON writers handle them, but be explicit."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def failure_reason(state: st.ExecutionState) -> str | None:
    """Why a failed execution failed, in one line; None when it has no error."""
    if state.error is None:
        return None
    return str(state.error.get("reason") or state.error.get("message") or "failed")
