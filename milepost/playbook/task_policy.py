"""A task's `spec.policy` (DSL 5): ordered `when`/`then` rules over the task's output,
with an `else` rule and what to do when no rule matches."""

from __future__ import annotations

from typing import Any

from milepost.playbook import durations, fields, model, problems

_ACTIONS = ("continue", "retry", "jump", "break", "fail")
_THEN_KEYS = frozenset({"do", "attempts", "backoff", "delay", "to", "set"})


def check(
    spec: dict[str, Any], w: problems.Where, task_names: tuple[str, ...]
) -> model.TaskPolicy | None:
    """The policy in a tool's `spec` (at `w`); other keys of that spec are reported."""
    _check_spec_keys(spec, w)
    if spec.get("policy") is None:
        return None
    pw = w / "policy"
    policy = fields.mapping(spec["policy"], pw)
    fields.check_keys(policy, pw, ("rules", "on_unmatched"))
    rules_raw = policy.get("rules") or []
    if not isinstance(rules_raw, list):
        (pw / "rules").error(f"expected a list, got {problems.type_name(rules_raw)}")
        rules_raw = []
    rules = [_rule(r, pw / "rules" / i, task_names) for i, r in enumerate(rules_raw)]
    on_unmatched = None
    if policy.get("on_unmatched") is not None:
        on_unmatched = fields.choice(
            policy["on_unmatched"], pw / "on_unmatched", ("continue", "fail")
        )
    return fields.build(
        pw,
        model.TaskPolicy,
        rules=tuple(r for r in rules if r is not None),
        on_unmatched=on_unmatched,
    )


def _check_spec_keys(spec: dict[str, Any], w: problems.Where) -> None:
    for key in spec:
        if key == "retry":
            (w / key).error(
                "tool spec.retry is not supported: use a policy rule with 'do: retry', "
                "or step spec.retry"
            )
        elif key not in ("policy", "timeout"):
            (w / key).warn(f"field {key!r} is ignored", show="parent")


def _rule(raw: Any, w: problems.Where, task_names: tuple[str, ...]) -> model.PolicyRule | None:
    rule = fields.mapping(raw, w)
    if "else" in rule:
        fields.check_keys(rule, w, ("else",))
        body = fields.mapping(rule["else"], w / "else")
        if "then" not in body:
            w.warn("policy 'else:' without 'then:' is deprecated: use 'else: {then: {...}}'")
            return _then_rule(None, body, w / "else", task_names)
        fields.check_keys(body, w / "else", ("then",))
        return _then_rule(None, body["then"], w / "else" / "then", task_names)
    fields.check_keys(rule, w, ("when", "then"))
    if "when" not in rule:
        w.error("a rule needs 'when' (with 'then') or 'else'")
        return None
    when = fields.condition(rule["when"], w / "when")
    if "then" not in rule:
        w.error("field 'then' is required next to 'when'")
        return None
    return _then_rule(when, rule["then"], w / "then", task_names)


def _then_rule(
    when: Any, raw: Any, w: problems.Where, task_names: tuple[str, ...]
) -> model.PolicyRule | None:
    then = fields.mapping(raw, w)
    fields.check_keys(then, w, _THEN_KEYS)
    kwargs: dict[str, Any] = {}
    do = fields.choice(then.get("do", "continue"), w / "do", _ACTIONS) or "continue"
    kwargs["do"] = do
    if "attempts" in then:
        kwargs["attempts"] = fields.count(then["attempts"], w / "attempts") or 3
    if "delay" in then:
        kwargs["delay"] = durations.check(then["delay"], w / "delay", positive=False) or 0.0
    if "backoff" in then:
        backoff = fields.choice(then["backoff"], w / "backoff", fields.BACKOFFS)
        kwargs["backoff"] = backoff or "none"
    else:
        kwargs["backoff"] = "fixed" if "delay" in then else "none"
    to = _jump_target(then.get("to"), do, w, task_names)
    if to is not None:
        kwargs["to"] = to
    kwargs["set"] = fields.set_block(then.get("set"), w / "set", bare_ok=True)
    then_model = fields.build(w, model.PolicyThen, **kwargs)
    if then_model is None:
        return None
    return fields.build(w, model.PolicyRule, when=when, then=then_model)


def _jump_target(to: Any, do: str, w: problems.Where, task_names: tuple[str, ...]) -> str | None:
    """`to` of a `do: jump` rule: a task of this pipeline or 'previous'."""
    if do != "jump":
        if to is not None:
            (w / "to").warn(f"'to' is ignored unless do is 'jump' (do: {do})")
        return None
    if to is None:
        w.error("'do: jump' requires 'to' (a task of this pipeline or 'previous')")
    elif to != "previous" and to not in task_names:
        (w / "to").error(f"unknown task {to!r} (tasks: {', '.join(task_names)}, or 'previous')")
    else:
        target: str = to
        return target
    return None
