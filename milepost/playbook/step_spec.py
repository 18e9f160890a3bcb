"""A step's `spec` (DSL 2, 10): timeout and liveness, retry, approval, admission and
compensation. Unset timeout, liveness and retry are inherited from `executor.spec`."""

from __future__ import annotations

import re
from typing import Any

from milepost.playbook import durations, fields, model, pools, problems
from milepost.playbook.context import LoadContext

_APPROVER_RE = re.compile(r"^(user|role):\S+$")
_STEP_SPEC_KEYS = frozenset(
    {"timeout", "retry", "liveness", "approval", "compensation", "policy", "pool"}
)
_RETRY_KEYS = frozenset({"max_attempts", "backoff", "delay", "max_delay", "retry_on"})
_APPROVAL_KEYS = frozenset(
    {"required", "approvers", "quorum", "expires_in", "allow_self_approval", "policy", "risk"}
)


def check(ctx: LoadContext, raw: Any, w: problems.Where, step: str) -> model.StepSpec:
    spec = fields.mapping(raw, w)
    fields.check_keys(spec, w, _STEP_SPEC_KEYS)
    ex = ctx.executor
    kwargs: dict[str, Any] = {
        "timeout": ex.timeout,
        "liveness": ex.liveness,
        "retry": ex.retry,
        "pool": ex.pool,
    }
    if spec.get("pool") is not None:
        kwargs["pool"] = pools.check(spec["pool"], w / "pool")
    for key in ("timeout", "liveness"):
        if spec.get(key) is not None:
            kwargs[key] = durations.check(spec[key], w / key)
    if spec.get("retry") is not None:
        kwargs["retry"] = retry(spec["retry"], w / "retry")
    _check_liveness(spec, kwargs["timeout"], kwargs["liveness"], ctx.executor_raw, w)
    if spec.get("approval") is not None:
        kwargs["approval"] = _approval(spec["approval"], w / "approval")
    if spec.get("policy") is not None:
        kwargs["admit"] = _admit(spec["policy"], w / "policy")
    if spec.get("compensation") is not None:
        target = _compensation(ctx, spec["compensation"], w / "compensation", step)
        if target is not None:
            kwargs["compensation"] = target
    return fields.build(w, model.StepSpec, **kwargs) or model.StepSpec()


def _check_liveness(
    spec: dict[str, Any],
    timeout: float | None,
    liveness: float | None,
    executor_raw: dict[str, Any],
    w: problems.Where,
) -> None:
    # DSL 10.2: liveness must exceed timeout, or an attempt could be declared lost before
    # its own timeout is up.
    own = "timeout" in spec or "liveness" in spec  # both inherited: reported on executor
    if not own or timeout is None or liveness is None or liveness > timeout:
        return
    lt, tt = (_quoted(spec, executor_raw, key) for key in ("liveness", "timeout"))
    where = w / "liveness" if "liveness" in spec else w
    where.error(f"spec.liveness ({lt}) must be greater than spec.timeout ({tt})", show="none")


def _quoted(spec: dict[str, Any], executor_raw: dict[str, Any], key: str) -> str:
    if key in spec:
        return durations.text(spec[key])
    return f"{durations.text(executor_raw.get(key))} from executor.spec"


def _compensation(ctx: LoadContext, target: Any, w: problems.Where, step: str) -> str | None:
    """The target's name, recorded for the graph checks that need every step."""
    if not isinstance(target, str):
        w.error(f"expected a step name, got {problems.type_name(target)}")
        return None
    ctx.graph.compensation[step] = (target, w)
    return target


def retry(raw: Any, w: problems.Where) -> model.RetrySpec | None:
    """A `spec.retry` of a step or of `executor.spec` (DSL 10.1)."""
    spec = fields.mapping(raw, w)
    fields.check_keys(spec, w, _RETRY_KEYS)
    kwargs: dict[str, Any] = {}
    if "max_attempts" in spec:
        kwargs["max_attempts"] = fields.count(spec["max_attempts"], w / "max_attempts") or 1
    for key in ("delay", "max_delay"):
        if key in spec:
            kwargs[key] = durations.check(spec[key], w / key, positive=False) or 0.0
    if "backoff" in spec:
        backoff = fields.choice(spec["backoff"], w / "backoff", fields.BACKOFFS)
        kwargs["backoff"] = backoff or "none"
    elif "delay" in spec:
        kwargs["backoff"] = "fixed"
    if "retry_on" in spec:
        kinds = spec["retry_on"]
        if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
            (w / "retry_on").error("expected a list of error kinds (strings)")
        else:
            kwargs["retry_on"] = tuple(kinds)
    return fields.build(w, model.RetrySpec, **kwargs)


def _approval(raw: Any, w: problems.Where) -> model.ApprovalSpec | None:
    spec = fields.mapping(raw, w)
    fields.check_keys(spec, w, _APPROVAL_KEYS)
    kwargs: dict[str, Any] = {"approvers": _approvers(spec.get("approvers"), w / "approvers")}
    if "quorum" in spec:
        kwargs["quorum"] = _quorum(spec["quorum"], w / "quorum", kwargs["approvers"])
    if "required" in spec:
        kwargs["required"] = fields.condition(spec["required"], w / "required")
    if "allow_self_approval" in spec:
        if not isinstance(spec["allow_self_approval"], bool):
            (w / "allow_self_approval").error("expected a boolean")
        else:
            kwargs["allow_self_approval"] = spec["allow_self_approval"]
    if spec.get("expires_in") is not None:
        kwargs["expires_in"] = durations.check(spec["expires_in"], w / "expires_in")
    if "risk" in spec:
        kwargs["risk"] = (
            fields.choice(spec["risk"], w / "risk", ("low", "medium", "high")) or "medium"
        )
    if spec.get("policy") is not None:
        kwargs.update(_approval_policy(spec["policy"], w / "policy"))
    return fields.build(w, model.ApprovalSpec, **kwargs)


def _approvers(raw: Any, w: problems.Where) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        w.error("expected a non-empty list of 'user:<id>' or 'role:<name>'")
        raw = []
    for i, who in enumerate(raw):
        if not isinstance(who, str) or not _APPROVER_RE.match(who):
            (w / i).error(f"expected 'user:<id>' or 'role:<name>', got {who!r}")
    return tuple(str(a) for a in raw)


def _quorum(raw: Any, w: problems.Where, approvers: tuple[str, ...]) -> int:
    quorum = fields.count(raw, w)
    distinct = set(approvers)
    # Only named users can be counted: a role may hold any number of people.
    users_only = distinct and all(a.startswith("user:") for a in distinct)
    if quorum is not None and users_only and quorum > len(distinct):
        w.error(f"quorum {quorum} exceeds the {len(distinct)} listed approver(s)")
    return quorum or 1


def _approval_policy(raw: Any, w: problems.Where) -> dict[str, Any]:
    if isinstance(raw, str | bool):
        return {"policy_check": raw}
    policy = fields.mapping(raw, w)
    fields.check_keys(policy, w, ("check", "reason"))
    if "check" not in policy:
        w.error("expected a template or {check, reason}: field 'check' is required")
        return {}
    return {
        "policy_check": fields.condition(policy["check"], w / "check"),
        "policy_reason": policy.get("reason"),
    }


def _admit(raw: Any, w: problems.Where) -> tuple[model.AdmitRule, ...]:
    policy = fields.mapping(raw, w)
    for key in policy:
        if key == "rules":
            (w / key).error(
                "task policy rules belong in tool.spec.policy.rules; "
                "step spec.policy only takes 'admit'"
            )
        elif key != "admit":
            (w / key).error(f"unknown field {key!r} (expected: admit)", show="parent")
    aw = w / "admit"
    admit = fields.mapping(policy.get("admit"), aw)
    fields.check_keys(admit, aw, ("rules",))
    rules = admit.get("rules") or []
    if not isinstance(rules, list):
        (aw / "rules").error(f"expected a list, got {problems.type_name(rules)}")
        return ()
    out = [_admit_rule(r, aw / "rules" / i) for i, r in enumerate(rules)]
    return tuple(r for r in out if r is not None)


def _admit_rule(raw: Any, w: problems.Where) -> model.AdmitRule | None:
    rule = fields.mapping(raw, w)
    when: Any = None
    if "else" in rule:
        fields.check_keys(rule, w, ("else",))
        body = fields.mapping(rule["else"], w / "else")
        if "then" in body:
            fields.check_keys(body, w / "else", ("then",))
            then_raw, tw = body["then"], w / "else" / "then"
        else:
            w.warn("admit 'else:' without 'then:' is deprecated: use 'else: {then: {...}}'")
            then_raw, tw = body, w / "else"
    else:
        fields.check_keys(rule, w, ("when", "then"))
        if "when" not in rule:
            w.error("a rule needs 'when' (with 'then') or 'else'")
            return None
        when = fields.condition(rule["when"], w / "when")
        then_raw, tw = rule.get("then"), w / "then"
    then = fields.mapping(then_raw, tw)
    fields.check_keys(then, tw, ("allow",))
    allow = then.get("allow", True)
    if not isinstance(allow, bool):
        (tw / "allow").error("expected a boolean")
        allow = True
    return fields.build(w, model.AdmitRule, when=when, allow=allow)
