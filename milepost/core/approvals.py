"""Approval gates (DSL 10.3): what a request shows, who may vote, and what a gate decides.

Pure: the state, the playbook, the time and ids come in. `core.decide` asks `request`
when a gated step starts, `resolve` each time it looks at a pending approval and
`recheck` before each later attempt of a granted step run; the engine service asks
`vote_event` to turn a decision into the event it appends.

The approved call is bound by digest. A request renders every command the step will
issue (the tool's fields and input, as the attempt will render them, secrets redacted)
and keeps the SHA-256 of each; right before the first command is issued the calls are
rendered again, before every later attempt its own call (`recheck`, with the expiry and
the policy), and again by the attempt before its tool runs (`verify`, with the expiry).
A call that differs from the approved one invalidates the approval instead of running.
What cannot be known before the attempt runs (a keychain secret, an earlier task's output
in a pipeline) is shown and digested as its template text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from milepost import ids, sanitize
from milepost.core import approval_state as ap
from milepost.core import context as cx
from milepost.core import events as ev
from milepost.core import state as st
from milepost.core.approval_state import Approval, Voter
from milepost.core.work import WorkItem, attempt_context
from milepost.errors import MilepostError, TemplateError
from milepost.playbook import durations, model, render

SHOWN_IDEMPOTENCY_KEY = "<idempotency_key>"
"""What a request shows for `{{ idempotency_key }}`: it differs per attempt, and a retry
must not invalidate the approval of its step run."""
_UNRENDERED_CONFIG = frozenset({"kind", "name"})


# -- refusals --------------------------------------------------------------------------------


class ApprovalNotFound(MilepostError):
    """No such approval."""

    code = "approval_not_found"


class ApprovalClosed(MilepostError):
    """The approval is no longer pending: a decision changes nothing."""

    code = "approval_closed"


class AlreadyVoted(MilepostError):
    """This identity has decided this approval already."""

    code = "already_voted"


class NotAnApprover(MilepostError):
    """This identity may not decide this approval."""

    code = "not_an_approver"


class SelfApproval(MilepostError):
    """Whoever started the run may not approve it (`allow_self_approval: false`)."""

    code = "self_approval"


class InvalidDecision(MilepostError):
    """A decision is `approve` or `deny`."""

    code = "invalid_decision"


# -- votes -----------------------------------------------------------------------------------


def check_vote(
    state: st.ExecutionState, approval_id: int, voter: Voter, decision: str, now: float
) -> Approval:
    """The approval `voter` may decide now, or the refusal (nothing is appended then)."""
    approval = state.approvals.get(approval_id)
    if approval is None:
        raise ApprovalNotFound(f"no approval {approval_id}", approval_id=str(approval_id))
    fields = {"approval_id": str(approval_id), "identity": voter.identity}
    if decision not in ap.DECISIONS:
        raise InvalidDecision(f"decision {decision!r} is not 'approve' or 'deny'", **fields)
    if not voter.identity.startswith("user:") or not ap.may_decide(approval, voter):
        raise NotAnApprover(
            f"{voter.identity} may not decide approval {approval_id} (approvers: "
            f"{', '.join(approval.approvers)})",
            **fields,
        )
    status = approval.status
    if status == ap.PENDING and approval.expires_at is not None and now >= approval.expires_at:
        status = ap.EXPIRED  # the tick has not recorded it yet: it is over all the same
    if status == ap.PENDING and (state.terminal or state.cancel_requested):
        status = ap.CANCELLED
    if status != ap.PENDING:
        raise ApprovalClosed(
            f"approval {approval_id} is {status}: a decision changes nothing",
            status=status,
            **fields,
        )
    if ap.is_self_approval(approval, voter):
        raise SelfApproval(
            f"{voter.identity} started execution {state.execution_id} and may not "
            "approve it (allow_self_approval is false)",
            **fields,
        )
    if ap.has_voted(approval, voter.identity):
        raise AlreadyVoted(f"{voter.identity} has decided approval {approval_id} already", **fields)
    return approval


def vote_event(
    state: st.ExecutionState,
    approval_id: int,
    voter: Voter,
    decision: str,
    reason: str | None,
    now: float,
    event_id: int,
) -> ev.Event:
    """The `approval.decided` event of a vote `check_vote` admits."""
    approval = check_vote(state, approval_id, voter, decision, now)
    payload = {
        "approval_id": approval_id,
        "identity": voter.identity,
        "roles": sorted(voter.roles),
        "decision": decision,
        "reason": reason,
    }
    return ev.new_event(
        event_id,
        state.execution_id,
        ev.APPROVAL_DECIDED,
        now,
        step=approval.step,
        payload=payload,
        meta={"actor": voter.identity},
        parent_event_id=approval_id,
    )


# -- the request -----------------------------------------------------------------------------


def required(spec: model.ApprovalSpec, context: Mapping[str, Any], step: str) -> bool:
    """`required` rendered (a bool or a template). A template that does not render raises
    TemplateError: the step fails rather than run ungated."""
    if isinstance(spec.required, bool):
        return spec.required
    where = f"step '{step}': spec.approval.required"
    value, problem = render.check_when(spec.required, context, where=where)
    if problem is not None:
        raise TemplateError(problem)
    return value


def calls(
    state: st.ExecutionState, playbook: model.Playbook, sr: st.StepRun
) -> list[dict[str, Any]]:
    """`[{index, input, digest}]`: every command of the step run, rendered as approvers see it."""
    indexes = range(sr.total) if sr.is_loop else [st.NO_INDEX]
    out = []
    for index in indexes:
        shown = render_call(state, playbook, sr, index)
        out.append({"index": index, "input": shown, "digest": digest(shown)})
    return out


def request(
    state: st.ExecutionState, playbook: model.Playbook, sr: st.StepRun, now: float
) -> dict[str, Any]:
    """The payload of `approval.requested` (the caller adds `approval_id`)."""
    step = playbook.steps[sr.step]
    spec = step.spec.approval
    assert spec is not None
    shown = calls(state, playbook, sr)
    return {
        "run": sr.run,
        "kind": step.tasks[0].kind if step.tasks else None,
        "calls": shown,
        "digest": digest([c["digest"] for c in shown]),
        "approvers": list(spec.approvers),
        "quorum": spec.quorum,
        "expires_in": spec.expires_in,
        "expires_at": None if spec.expires_in is None else now + spec.expires_in,
        "risk": spec.risk,
        "policy": policy_text(spec),
        "allow_self_approval": spec.allow_self_approval,
        "started_by": state.started_by,
    }


def policy_text(spec: model.ApprovalSpec) -> str | None:
    if spec.policy_check is None:
        return None
    return (
        spec.policy_check if isinstance(spec.policy_check, str) else json.dumps(spec.policy_check)
    )


def render_call(
    state: st.ExecutionState, playbook: model.Playbook, sr: st.StepRun, index: int
) -> dict[str, Any]:
    """One command's call, rendered from the context its attempt gets (`attempt_context`)
    the way the attempt renders it, then redacted."""
    context, args = attempt_context(state, playbook, sr.step, sr, index)
    return shown_call(playbook, sr.step, context, args, sr.run, index, state.execution_id)


def shown_call(
    playbook: model.Playbook,
    step_name: str,
    context: Mapping[str, Any],
    args: Mapping[str, Any],
    run: int,
    index: int,
    execution_id: int,
) -> dict[str, Any]:
    """The call of one attempt as approvers see it: `{tasks: [{task, kind, config, input}]}`.
    The attempt runner calls this too (`verify`), with the context its command carries."""
    step = playbook.steps[step_name]
    op_key = ids.operation_key(
        execution_id, step_name, run, None if index == st.NO_INDEX else index
    )
    base = {**context, "idempotency_key": SHOWN_IDEMPOTENCY_KEY, "operation_key": op_key}
    tasks = []
    for task in step.tasks:
        kind, config, input_templates = task.kind, task.config, dict(task.input)
        if kind == "workbook":
            entry = playbook.workbook[str(config.get("name"))]
            kind, config = entry.task.kind, entry.task.config
            input_templates = {**entry.task.input, **input_templates}
        templates = {**step.input, **args, **input_templates}
        inputs = {key: _lenient(value, base) for key, value in templates.items()}
        field_context = cx.overlay(base, inputs) if inputs else dict(base)
        field_context["idempotency_key"] = SHOWN_IDEMPOTENCY_KEY
        fields = {
            key: value if key in _UNRENDERED_CONFIG else _lenient(value, field_context)
            for key, value in config.items()
        }
        tasks.append({"task": task.name, "kind": kind, "config": fields, "input": inputs})
    secrets = sanitize.sensitive_values(context.get("workload"))
    shown: dict[str, Any] = ev.jsonable(
        sanitize.Redactor(secrets).value(sanitize.mask({"tasks": tasks}))
    )
    return shown


def _lenient(value: Any, context: Mapping[str, Any]) -> Any:
    """`value` rendered leaf by leaf; a leaf that does not render yet stays its template."""
    if isinstance(value, dict):
        return {k: _lenient(v, context) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_lenient(v, context) for v in value]
    try:
        return render.render_value(value, context, where="approval")
    except TemplateError:
        return value
    except Exception:  # a filter raising on a value it does not know yet: shown as written
        return value


def digest(value: Any) -> str:
    """SHA-256 of the canonical JSON of `value` (keys sorted, no spaces)."""
    text = json.dumps(ev.jsonable(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- what a pending approval leads to --------------------------------------------------------


@dataclass(slots=True)
class Resolution:
    """What `resolve` decided for a pending approval: nothing yet (`event` None, maybe a
    `wake_at`), or the outcome event's type and payload, with the step's error when the
    outcome fails it."""

    event: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    wake_at: float | None = None


def resolve(
    state: st.ExecutionState,
    playbook: model.Playbook,
    sr: st.StepRun,
    approval: Approval,
    now: float,
) -> Resolution:
    """Expiry first (so an approval is never used after `expires_at`), then a denial, then
    the quorum, re-checking the call and the policy right before the grant."""
    base = {"approval_id": approval.approval_id, "run": approval.run}
    if approval.expires_at is not None and now >= approval.expires_at:
        after = _duration(approval.expires_in or approval.expires_at - approval.requested_at)
        return _failed(
            ev.APPROVAL_EXPIRED,
            {**base, "expires_at": approval.expires_at},
            f"approval expired after {after}",
        )
    denial = approval.denial
    if denial is not None:
        message = f"approval rejected by {denial.identity}" + (
            f": {denial.reason}" if denial.reason else ""
        )
        return _failed(
            ev.APPROVAL_DENIED, {**base, "by": denial.identity, "reason": denial.reason}, message
        )
    approvers = [v.identity for v in approval.approvals]
    if len(approvers) < approval.quorum:
        return Resolution(wake_at=approval.expires_at)
    changed = _changed(state, playbook, sr, approval)
    if changed is not None:
        reason = f"the call changed since it was approved ({changed})"
        return _failed(
            ev.APPROVAL_INVALIDATED,
            {**base, "cause": "changed", "changed": changed, "reason": reason},
            f"approval invalidated: {reason}",
        )
    refusal = _policy_refusal(state, playbook, sr)
    if refusal is not None:
        return _failed(
            ev.APPROVAL_INVALIDATED,
            {**base, "cause": "policy", "changed": None, "reason": refusal},
            f"approval invalidated: {refusal}",
        )
    return Resolution(
        ev.APPROVAL_GRANTED, {**base, "approvers": approvers, "digest": approval.digest}
    )


def _failed(event: str, payload: dict[str, Any], message: str) -> Resolution:
    error = {"kind": "approval", "message": message, "retryable": False}
    return Resolution(event, payload, error)


def _changed(
    state: st.ExecutionState, playbook: model.Playbook, sr: st.StepRun, approval: Approval
) -> str | None:
    """Where the first call rendered now differs from the approved one, or None."""
    now_calls = calls(state, playbook, sr)
    if len(now_calls) != len(approval.calls):
        return f"loop items: {len(approval.calls)} approved, {len(now_calls)} now"
    for then, now in zip(approval.calls, now_calls, strict=True):
        if then.get("digest") != now["digest"]:
            where = _difference(then.get("input"), now["input"]) or "input"
            if sr.is_loop:
                where = f"iteration {now['index']}: {where}"
            return where
    return None


def _difference(a: Any, b: Any, path: str = "") -> str | None:
    """The first path where two rendered calls differ (`input.amount`), one task's path
    shown without its `tasks[0].` prefix."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) == {"tasks"} == set(b) and len(a["tasks"]) == len(b["tasks"]) == 1:
            return _difference(a["tasks"][0], b["tasks"][0], path)
        for key in sorted(set(a) | set(b)):
            found = _difference(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _difference(x, y, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if a == b else (path or "call")


def _policy_refusal(
    state: st.ExecutionState, playbook: model.Playbook, sr: st.StepRun
) -> str | None:
    """The readable reason the policy refuses the call now, or None when it allows it.
    False, undefined or unrenderable all refuse (fail closed)."""
    spec = playbook.steps[sr.step].spec.approval
    if spec is None or spec.policy_check is None:
        return None
    context = dict(cx.base_context(state, playbook.reads_of(sr.step).start))
    where = f"step '{sr.step}': spec.approval.policy"
    allowed, problem = render.check_when(spec.policy_check, context, where=where)
    if allowed:
        return None
    if spec.policy_reason is not None:
        try:
            return str(render.render_value(spec.policy_reason, context, where=where, mode="set"))
        except TemplateError as exc:
            return f"{policy_text(spec)} ({exc.message})"
    return problem or f"policy {policy_text(spec)} is false"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


# -- every attempt after the grant ----------------------------------------------------------


def recheck(
    state: st.ExecutionState,
    playbook: model.Playbook,
    sr: st.StepRun,
    approval: Approval,
    index: int,
    attempt: int,
    now: float,
) -> dict[str, Any] | None:
    """Before decide issues an attempt of a granted step run beyond those the grant issued
    (a `spec.retry` retry, a re-issue after a lost lease, a later loop iteration): the
    payload of the `approval.invalidated` that refuses it, or None when the approval still
    covers it. The same checks as the grant's, for this exact call: expiry, the call's
    digest, the policy against the context of now. People are not asked again (DSL 10.3),
    but nothing runs on an approval that no longer holds."""
    base = {"approval_id": approval.approval_id, "run": sr.run, "index": index, "attempt": attempt}
    if approval.expires_at is not None and now >= approval.expires_at:
        reason = expired_reason(now - approval.expires_at)
        return {**base, "cause": "expired", "changed": None, "reason": reason}
    changed = _changed_call(state, playbook, sr, approval, index)
    if changed is not None:
        reason = f"the call changed since it was approved ({changed})"
        return {**base, "cause": "changed", "changed": changed, "reason": reason}
    refusal = _policy_refusal(state, playbook, sr)
    if refusal is not None:
        return {**base, "cause": "policy", "changed": None, "reason": refusal}
    return None


def expired_reason(late: float) -> str:
    return f"the approval expired {durations.span(late)} earlier"


def _changed_call(
    state: st.ExecutionState,
    playbook: model.Playbook,
    sr: st.StepRun,
    approval: Approval,
    index: int,
) -> str | None:
    """Where the call of `index` rendered now differs from the approved one, or None."""
    then = approval.call(index)
    if then is None:  # fail closed: nothing approved this call
        return f"no approved call for index {index}"
    shown = render_call(state, playbook, sr, index)
    if then.get("digest") == digest(shown):
        return None
    return _difference(then.get("input"), shown) or "input"


# -- at the attempt --------------------------------------------------------------------------


def verify(playbook: model.Playbook, item: WorkItem, now: float) -> dict[str, Any] | None:
    """Right before the tool runs, on the attempt's side: None when the approval still
    covers this attempt, else the error that refuses it (`approval_state.refused_attempt`):
    the approval expired since the command was issued (it waited in a queue, a slow worker
    claimed it), or the call rendered from the command's context is not the approved one
    (the approved input itself is not in the work item, so it cannot say where)."""
    if item.approval_expires_at is not None and now >= item.approval_expires_at:
        reason = expired_reason(now - item.approval_expires_at)
        return ap.refused_attempt(item.attempt, "expired", reason)
    if item.approved_digest is None:
        return None
    shown = shown_call(
        playbook,
        item.step,
        item.context,
        item.args,
        item.run,
        item.index,
        item.execution_id,
    )
    if digest(shown) == item.approved_digest:
        return None
    return ap.refused_attempt(item.attempt, "changed", "the call changed since it was approved")
