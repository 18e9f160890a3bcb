"""Run one attempt of a step: its tool, or its pipeline of tasks with their policies.

DSL 4 (pipelines), 5 (task policies and the output envelope), 7 (writes inside an
attempt): writes go to an overlay that later tasks see at once and that is committed
(returned as `AttemptResult.ctx`) only when the attempt succeeds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from milepost import telemetry
from milepost.attempt import keychain
from milepost.attempt import usage as reported
from milepost.core import approvals, logs, usage
from milepost.core import context as cx
from milepost.core.policies import retry_delay
from milepost.core.work import AttemptResult, TaskRetry, WorkItem
from milepost.errors import MilepostError, TemplateError
from milepost.playbook import model, render
from milepost.sanitize import Redactor, sensitive_values
from milepost.tools.base import CredentialLookup, ToolCall, ToolResult

MAX_TASK_EXECUTIONS = 10_000
_UNRENDERED_CONFIG = frozenset({"kind", "name"})

log = logging.getLogger(__name__)


class ToolRunner(Protocol):
    async def run(self, call: ToolCall) -> ToolResult: ...


OnRetry = Callable[[TaskRetry], None]
"""Told, before the attempt waits, that a task policy retries a failed task: the transport
reports it at once (`core.work.retry_note_events`), its logs with it; never awaited, the
wait is the policy's."""


class _TaskFailed(Exception):
    def __init__(self, error: dict[str, Any], result: Any = None) -> None:
        super().__init__(error.get("message"))
        self.error = error
        self.result = result


@dataclass(slots=True)
class _Pipeline:
    """The mutable scratch of one attempt."""

    item: WorkItem
    step: model.Step
    playbook: model.Playbook
    deadline: float | None
    redactor: Redactor
    locals: dict[str, Any] = field(default_factory=dict)
    ctx_writes: dict[str, Any] = field(default_factory=dict)
    iter_writes: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)
    failed_ok: bool = False
    usage: list[dict[str, Any]] = field(default_factory=list)
    """Every task execution's usage, retries of a policy included: each was spent."""
    log_cap: int = logs.DEFAULT_CAP
    printed: list[logs.Captured] = field(default_factory=list)
    """What every task execution printed, as its tool gave it (`AttemptResult.logs`)."""
    on_retry: OnRetry | None = None
    noted: int = 0
    """The pieces of `printed` reported already with a retry's note: the attempt's report
    carries the rest."""

    def context(self) -> dict[str, Any]:
        base = self.item.context
        context = cx.overlay(base, self.locals) if self.locals else dict(base)
        if self.ctx_writes:
            context["ctx"] = cx.with_writes(base["ctx"], self.ctx_writes)
        if self.iter_writes:
            context["iter"] = cx.with_writes(base.get("iter", {}), self.iter_writes)
        return context

    def apply_set(self, values: dict[str, Any], context: dict[str, Any], where: str) -> None:
        for key, template in values.items():
            value = render.render_value(template, context, where=f"{where} '{key}'", mode="set")
            scope, name = cx.split_set_key(key)
            if scope == "ctx":
                self.ctx_writes[name] = value
                context["ctx"] = cx.with_writes(context["ctx"], {name: value})
            elif scope == "iter":
                self.iter_writes[name] = value
                context["iter"] = cx.with_writes(context.get("iter", {}), {name: value})
            else:
                self.locals[name] = value
                context[name] = value


async def run_attempt(
    playbook: model.Playbook,
    item: WorkItem,
    tools: ToolRunner,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    credentials: CredentialLookup | None = None,
    log_cap: int = logs.DEFAULT_CAP,
    clock: Callable[[], float] = time.time,
    on_retry: OnRetry | None = None,
) -> AttemptResult:
    """Run one attempt in its span when this process exports spans (`milepost.telemetry`):
    the one place both transports run attempts. `log_cap`: bytes kept of each stream it
    prints (`MILEPOST_LOG_CAP_BYTES`); `clock`: the engine's time (a worker's estimate of
    its server's), against which an approval's expiry is checked; `on_retry`: told of each
    task policy retry of a failed task before its wait (`OnRetry`)."""
    attempt = functools.partial(
        _run_attempt,
        playbook,
        item,
        tools,
        sleep=sleep,
        credentials=credentials,
        log_cap=log_cap,
        clock=clock,
        on_retry=on_retry,
    )
    spans = telemetry.active()
    if spans is None:
        return await attempt()
    with spans.attempt(item) as span:
        outcome = await attempt()
        spans.attempt_outcome(span, outcome)
        return outcome


async def _run_attempt(
    playbook: model.Playbook,
    item: WorkItem,
    tools: ToolRunner,
    *,
    sleep: Callable[[float], Awaitable[None]],
    credentials: CredentialLookup | None,
    log_cap: int,
    clock: Callable[[], float],
    on_retry: OnRetry | None = None,
) -> AttemptResult:
    """Run one attempt; never raises for a task failure (it becomes `AttemptResult.error`).

    When the playbook has a keychain, its values are resolved here, for this attempt
    only. They, and whatever looks like a secret (`sanitize.SECRET_PATTERNS`), are
    redacted from everything the attempt reports, and the tools get the same redaction
    for what they log (`ToolCall.redact`).
    """
    # the workload's sensitive values are real here (opened from its sealed entry,
    # `engine.seal`) and masked in the log: a step echoing one must not store it
    secrets = sensitive_values(item.context.get("workload"))
    # the approval must still cover this attempt when its tool is about to run, checked
    # before any secret is resolved: not expired since the command was issued (it waited
    # in a queue, a slow worker claimed it), the call the approved one (DSL 10.3)
    refused = approvals.verify(playbook, item, clock())
    if refused is not None:
        return AttemptResult(ok=False, error=refused)
    if playbook.keychain:
        try:
            resolved = keychain.resolve(playbook, item.context, credentials)
        except MilepostError as exc:
            error = {"kind": "keychain", "message": exc.message, "retryable": False}
            return AttemptResult(ok=False, error=Redactor(secrets).value(error))
        secrets.extend(keychain.secret_texts(playbook, resolved))
        item = dataclasses.replace(item, context={**item.context, "keychain": resolved})
    redactor = Redactor(secrets)
    try:
        outcome = await _run(playbook, item, tools, sleep, redactor, log_cap, on_retry)
    except Exception as exc:  # a bug in a tool must fail the step, not hang the run
        outcome = _crashed(item, exc, redactor)
    return dataclasses.replace(
        outcome,
        result=redactor.value(outcome.result),
        ctx=redactor.value(outcome.ctx),
        error=redactor.value(outcome.error),
        logs=_logs(outcome.logs, redactor, log_cap),
    )


def _logs(
    pieces: Sequence[logs.Captured], redactor: Redactor, log_cap: int
) -> tuple[logs.Captured, ...]:
    """Each stream's pieces (one per task execution) redacted, then joined and capped:
    redacted first, so a cut never leaves half a secret that redaction would not know."""
    if not pieces:  # most attempts (http, llm) print nothing: no sink per stream
        return ()
    # a NUL, which no text column of PostgreSQL and no API string holds, shows as U+FFFD
    found = (
        logs.capped(
            stream,
            [
                dataclasses.replace(p, text=redactor.text(p.text.replace("\x00", "\ufffd")))
                for p in pieces
                if p.stream == stream
            ],
            log_cap,
        )
        for stream in logs.STREAMS
    )
    return tuple(c for c in found if c is not None)


def _crashed(item: WorkItem, exc: Exception, redactor: Redactor) -> AttemptResult:
    """The `internal` outcome of a crash; its traceback is logged here, redacted, because
    its frames' values and messages may hold the attempt's secrets."""
    log.error(
        "attempt crashed (step %r, execution %s)\n%s",
        item.step,
        item.execution_id,
        redactor.text(traceback.format_exc()),
        extra={
            "action": "attempt_crashed",
            "command_id": str(item.command_id),
            "execution_id": str(item.execution_id),
            "step": item.step,
        },
    )
    return AttemptResult(
        ok=False, error={"kind": "internal", "message": f"{type(exc).__name__}: {exc}"}
    )


async def _run(
    playbook: model.Playbook,
    item: WorkItem,
    tools: ToolRunner,
    sleep: Callable[[float], Awaitable[None]],
    redactor: Redactor,
    log_cap: int,
    on_retry: OnRetry | None = None,
) -> AttemptResult:
    step = playbook.steps[item.step]
    started = time.monotonic()
    timeout = step.spec.timeout
    pipe = _Pipeline(
        item,
        step,
        playbook,
        started + timeout if timeout else None,
        redactor,
        log_cap=log_cap,
        on_retry=on_retry,
    )
    try:
        if timeout:
            # the tools enforce the remaining time themselves (python kills its process);
            # this is the backstop for anything that does not
            coro = _run_tasks(pipe, tools, sleep)
            await asyncio.wait_for(coro, timeout + 1.0)
        else:
            await _run_tasks(pipe, tools, sleep)
    except _TaskFailed as failed:
        return AttemptResult(
            ok=False,
            result=failed.result,
            error=failed.error,
            duration_ms=(time.monotonic() - started) * 1000,
            usage=usage.add(pipe.usage),
            logs=tuple(pipe.printed[pipe.noted :]),
        )
    except TimeoutError:
        error = {
            "kind": "timeout",
            "message": f"step exceeded spec.timeout of {timeout:g}s",
            "retryable": True,
            "code": "TIMEOUT",
        }
        return AttemptResult(
            ok=False,
            error=error,
            duration_ms=(time.monotonic() - started) * 1000,
            usage=usage.add(pipe.usage),
            logs=tuple(pipe.printed[pipe.noted :]),
        )
    return AttemptResult(
        ok=True,
        result=_step_result(pipe),
        ctx=pipe.ctx_writes,
        failed_ok=pipe.failed_ok,
        duration_ms=(time.monotonic() - started) * 1000,
        usage=usage.add(pipe.usage),
        logs=tuple(pipe.printed[pipe.noted :]),
    )


def _step_result(pipe: _Pipeline) -> Any:
    if not pipe.step.pipeline:
        return pipe.results.get(pipe.step.tasks[0].name)
    merged: dict[str, Any] = dict(pipe.results)
    for name in pipe.finished:
        value = pipe.results.get(name)
        if isinstance(value, dict):
            merged.update(value)
    return merged


async def _run_tasks(
    pipe: _Pipeline, tools: ToolRunner, sleep: Callable[[float], Awaitable[None]]
) -> None:
    tasks = pipe.step.tasks
    names = [t.name for t in tasks]
    position = 0
    executions = 0
    while position < len(tasks):
        task = tasks[position]
        attempt = 0
        while True:
            executions += 1
            attempt += 1
            if executions > MAX_TASK_EXECUTIONS:
                raise _TaskFailed(
                    _error(
                        pipe,
                        task,
                        "policy",
                        f"more than {MAX_TASK_EXECUTIONS} task executions in one attempt",
                    )
                )
            context = pipe.context()
            result = _take_usage(pipe, task, await _execute(pipe, task, context, tools))
            pipe.printed.extend(result.logs)
            envelope = _envelope(result, attempt)
            action = _decide_policy(pipe, task, context, envelope, attempt)
            if action.do == "retry" and attempt < action.attempts:
                wait = retry_delay(action.backoff, action.delay, attempt)
                wait = max(wait, result.retry_after or 0.0)
                if not result.ok:
                    _note_retry(pipe, task, result, attempt + 1, action.attempts, wait)
                await sleep(wait)
                continue
            break
        if action.do == "retry":  # attempts spent
            if result.ok:
                # A retry asked for on an ok result (polling until a condition holds) has
                # no tool error to report; `_tool_error` used to produce kind 'error' with
                # the message 'failed', which told the user nothing.
                raise _TaskFailed(
                    _error(
                        pipe,
                        task,
                        "policy",
                        f"policy retry exhausted: {attempt} attempts, the condition still held",
                    ),
                    result.data,
                )
            raise _TaskFailed(_tool_error(pipe, task, result), result.data)
        if action.do == "fail":
            if result.ok:
                raise _TaskFailed(
                    _error(pipe, task, "policy", "policy requested fail"), result.data
                )
            raise _TaskFailed(_tool_error(pipe, task, result), result.data)
        # continue, break, jump: commit the task's result and its writes
        output = result.data if result.ok else None
        if not result.ok:
            pipe.failed_ok = True
        pipe.results[task.name] = result.data
        if task.name in pipe.finished:
            pipe.finished.remove(task.name)
        pipe.finished.append(task.name)
        if pipe.step.pipeline:
            pipe.locals[task.name] = result.data
        if action.set or task.set:  # most tasks set nothing: no contexts to build
            where = f"step '{pipe.step.name}'" + (
                f" task '{task.name}'" if pipe.step.pipeline else ""
            )
            try:
                policy_context = dict(context, output=envelope, _attempt=attempt)
                pipe.apply_set(action.set, policy_context, f"{where}: policy set")
                set_context = pipe.context()
                set_context["output"] = output
                pipe.apply_set(task.set, set_context, f"{where}: set")
            except TemplateError as exc:
                raise _TaskFailed(_error(pipe, task, **exc.failure())) from None
        if action.do == "break":
            return
        if action.do == "jump":
            target = action.to
            position = position - 1 if target == "previous" else names.index(target or "")
            position = max(position, 0)
            continue
        position += 1


def _note_retry(
    pipe: _Pipeline, task: model.Task, result: ToolResult, attempt: int, attempts: int, wait: float
) -> None:
    """Tell the transport that a failed task runs again in `wait` seconds, with what it
    printed: an operator sees the wait and the traceback now, not when the attempt ends."""
    if pipe.on_retry is None:
        return
    printed = pipe.printed[pipe.noted :]
    note = TaskRetry(
        task=task.name if pipe.step.pipeline else None,
        error=pipe.redactor.value(_tool_error(pipe, task, result)),
        attempt=attempt,
        attempts=attempts,
        delay=wait,
        logs=_logs(printed, pipe.redactor, pipe.log_cap),
    )
    try:
        pipe.on_retry(note)
    except Exception:  # a note that cannot go must not fail the attempt: its report says it all
        log.warning("could not report a task policy retry (step %r)", pipe.step.name, exc_info=True)
        return
    pipe.noted = len(pipe.printed)


async def _execute(
    pipe: _Pipeline, task: model.Task, context: dict[str, Any], tools: ToolRunner
) -> ToolResult:
    """Render the task's input and fields, then run its tool."""
    step = pipe.step
    kind, config, input_templates = task.kind, task.config, dict(task.input)
    tool_timeout = task.timeout
    if kind == "workbook":
        entry = pipe.playbook.workbook[str(config.get("name"))]
        kind, config = entry.task.kind, entry.task.config
        input_templates = {**entry.task.input, **input_templates}
        # The entry's own tool `spec.timeout` is part of the tool it runs (DSL 3.6); it
        # was accepted at load and then silently dropped. The caller's, if given, wins.
        tool_timeout = task.timeout or entry.task.timeout
    templates = {**step.input, **pipe.item.args, **input_templates}
    prefix = f"step '{step.name}'" + (f" task '{task.name}'" if step.pipeline else "")
    # DSL 10.4: every tool sees `{{ idempotency_key }}` (e.g. in an X-Request-Id header).
    # It was only passed in ToolCall, so rendering it failed as an undefined name. It is
    # a reserved name: the engine's value wins over input keys of the same name.
    idem_key = pipe.item.idempotency_key
    op_key = pipe.item.operation_key
    render_context = {**context, "idempotency_key": idem_key, "operation_key": op_key}
    try:
        inputs = {
            key: render.render_value(value, render_context, where=f"{prefix}: input '{key}'")
            for key, value in templates.items()
        }
        field_context = cx.overlay(render_context, inputs) if inputs else render_context
        field_context["idempotency_key"] = idem_key
        field_context["operation_key"] = op_key
        fields = {
            key: value
            if key in _UNRENDERED_CONFIG
            else render.render_value(value, field_context, where=f"{prefix}: field '{key}'")
            for key, value in config.items()
        }
    except TemplateError as exc:
        raise _TaskFailed(_error(pipe, task, **exc.failure())) from None
    if "keychain" in context:  # python's `context` global is a snapshot without secrets
        context = {k: v for k, v in context.items() if k != "keychain"}
    call = ToolCall(
        kind=kind,
        config=fields,
        input=inputs,
        context=context,
        idempotency_key=idem_key,
        operation_key=op_key,
        timeout=_remaining(pipe, tool_timeout),
        execution_id=str(pipe.item.execution_id),
        step=step.name,
        command_id=pipe.item.command_id,
        epoch=pipe.item.epoch,
        redact=pipe.redactor.text,
        log_cap=pipe.log_cap,
    )
    return await tools.run(call)


def _take_usage(pipe: _Pipeline, task: model.Task, result: ToolResult) -> ToolResult:
    """The result without the usage it reported, which the attempt adds up (DSL 10.6)."""
    if result.usage is None and result.http is None:  # what most results are: nothing to take
        return result
    where = f"step '{pipe.step.name}'" + (f" task '{task.name}'" if pipe.step.pipeline else "")
    try:
        result, entries = reported.take(result, where)
    except usage.UsageInvalid as exc:  # uncounted, a budget would let the run spend on
        raise _TaskFailed(_error(pipe, task, "usage", exc.message), result.data) from None
    pipe.usage.extend(entries)
    return result


def _remaining(pipe: _Pipeline, tool_timeout: float | None) -> float | None:
    limits = [t for t in (tool_timeout,) if t]
    if pipe.deadline is not None:
        limits.append(max(0.001, pipe.deadline - time.monotonic()))
    return min(limits) if limits else None


def _envelope(result: ToolResult, attempt: int) -> dict[str, Any]:
    envelope: dict[str, Any] = {
        "status": "ok" if result.ok else "error",
        "data": result.data,
        "error": result.error.to_dict() if result.error else None,
        "meta": {"attempt": attempt, "duration_ms": result.duration_ms},
    }
    if result.http is not None:
        envelope["http"] = result.http
    return envelope


_CONTINUE = model.PolicyThen(do="continue")
_FAIL = model.PolicyThen(do="fail")


def _decide_policy(
    pipe: _Pipeline,
    task: model.Task,
    context: dict[str, Any],
    envelope: dict[str, Any],
    attempt: int,
) -> model.PolicyThen:
    policy = task.policy
    if policy is not None and policy.rules:
        rule_context = dict(context, output=envelope, _attempt=attempt)
        for i, rule in enumerate(policy.rules):
            if rule.when is None or render.render_when(
                rule.when,
                rule_context,
                where=f"step '{pipe.step.name}' task '{task.name}': policy.rules[{i}].when",
            ):
                return rule.then
    if policy is not None and policy.on_unmatched:
        return _CONTINUE if policy.on_unmatched == "continue" else _FAIL
    return _CONTINUE if envelope["status"] == "ok" else _FAIL


def _error(
    pipe: _Pipeline, task: model.Task, kind: str, message: str, **extra: Any
) -> dict[str, Any]:
    return {
        "kind": kind,
        "message": message,
        "retryable": False,
        "task": task.name if pipe.step.pipeline else None,
        **extra,
    }


def _tool_error(pipe: _Pipeline, task: model.Task, result: ToolResult) -> dict[str, Any]:
    error: dict[str, Any] = (
        result.error.to_dict() if result.error else {"kind": "error", "message": "failed"}
    )
    error["task"] = task.name if pipe.step.pipeline else None
    if result.retry_after:
        error["retry_after"] = result.retry_after
    return error
