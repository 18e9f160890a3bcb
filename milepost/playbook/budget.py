"""`executor.spec.budget: {tokens: 200000, cost: 5.0}` (DSL 10.6), checked at load."""

from __future__ import annotations

import math
from typing import Any

from milepost.playbook import fields, model, problems

_KEYS = ("tokens", "cost")


def parse(raw: Any, w: problems.Where) -> model.Budget | None:
    """The budget, or None with a problem at `w` for each wrong key or value."""
    spec = fields.mapping(raw, w)
    if not isinstance(raw, dict):
        return None
    fields.check_keys(spec, w, _KEYS)
    if not any(key in spec for key in _KEYS):
        w.error("expected at least one of: cost, tokens")
        return None
    kwargs: dict[str, Any] = {}
    tokens: Any = spec.get("tokens")
    if "tokens" in spec:
        if fields.is_int(tokens) and tokens > 0:
            kwargs["tokens"] = int(tokens)
        else:
            (w / "tokens").error(f"expected a positive integer, got {tokens!r}")
    cost: Any = spec.get("cost")
    if "cost" in spec:
        number = isinstance(cost, int | float) and not isinstance(cost, bool)
        if number and math.isfinite(cost) and cost > 0:
            kwargs["cost"] = float(cost)
        else:
            (w / "cost").error(f"expected a positive number, got {cost!r}")
    if len(kwargs) != sum(key in spec for key in _KEYS):
        return None
    return fields.build(w, model.Budget, **kwargs)
