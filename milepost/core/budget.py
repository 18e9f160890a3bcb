"""`executor.spec.budget` (DSL 10.6): a run whose usage passed its budget fails at the next
step boundary.

`decide` asks `check` when step runs finish; past the budget it records
`budget.exceeded`, whose fold sets the run's failure: no new step or iteration starts, and
the run fails with that error once the commands already running have finished (usage
spent on them is counted too). Pure: the totals come from the fold.
"""

from __future__ import annotations

from typing import Any

from milepost.core import state as st
from milepost.core.usage import Totals
from milepost.playbook import model

KIND = "budget"


def check(budget: model.Budget | None, totals: Totals, step: str) -> dict[str, Any] | None:
    """The run's error when `totals` pass `budget` after `step` finished, else None."""
    if budget is None:
        return None
    passed = []
    if budget.tokens is not None and totals.tokens > budget.tokens:
        passed.append(f"tokens {totals.tokens} > {budget.tokens}")
    if budget.cost is not None and totals.cost > budget.cost:
        passed.append(f"cost {_number(totals.cost)} > {_number(budget.cost)}")
    if not passed:
        return None
    message = f"budget exceeded: {', '.join(passed)} after step '{step}'"
    return {
        "kind": KIND,
        "message": message,
        "reason": message,
        "step": step,
        "task": None,
        "usage": {"tokens": totals.tokens, "cost": totals.cost},
        "budget": budget.model_dump(exclude_none=True),
    }


def after_iteration(
    budget: model.Budget | None, state: st.ExecutionState, sr: st.StepRun
) -> dict[str, Any] | None:
    """The run's error when an iteration of the loop `sr` ended past the budget and the
    loop would issue another (or a retry): an iteration's end is a step boundary too, so
    a loop stops issuing iterations once the budget is passed; those in flight finish."""
    if not sr.is_loop or not sr.results or not (sr.retry_at or sr.next_index < sr.total):
        return None
    return check(budget, state.usage, sr.step)


def cut_short(state: st.ExecutionState) -> str:
    """Why a loop cut short by the run's failure ended (its `step.exit` CANCELLED)."""
    failure = state.failure or {}
    return "budget exceeded" if failure.get("kind") == KIND else "run failed elsewhere"


def _number(value: float) -> str:
    """`5.12`, `5.0`: sums of floats show as people wrote them, not `5.120000000000001`."""
    return repr(round(float(value), 6))
