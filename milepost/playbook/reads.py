"""Which render-context names a step's templates read: what its commands must carry, and
what the server builds to start and to end it.

A command carries the render context (DSL 9.2) its attempt renders against. Carrying the
whole context makes each command of a long chain carry every earlier step's result: the
server builds, serializes and sends it, the worker parses and copies it for every render,
and python receives it, so a step costs more the later it comes (O(n) per step, O(n²) per
run). A step's templates name what they read, so its command carries those names, plus
the reserved names `workload`, `ctx`, `iter` and `execution_id`, which are always there.

Everything the worker renders for an attempt counts: the step's input, each task's input,
fields, policy rules and `set` (a workbook task's entry too), and the keychain. The answer
is None, "the whole context", when that cannot be known from the templates:
- a python task whose code mentions `context`, the global that exposes the whole
  render context, or whose code is itself a template (its rendered text could);
- a template that does not parse (its render reports the error; meanwhile anything).

The server's own renders are trimmed the same way: admission rules, `loop.in`,
`max_in_flight` and the approval's `required` and `policy` as the step starts; its `set` and arcs (`when`, `set`, `args`) as it ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from milepost.playbook import model, render
from milepost.playbook.coercion import is_template
from milepost.sanitize import strings_in


def step_reads(
    step: model.Step,
    workbook: Mapping[str, model.WorkbookEntry],
    keychain_reads: frozenset[str] | None,
) -> model.StepReads:
    """What `step`'s templates read when it starts, in each attempt and when it ends."""
    start: list[Any] = [rule.when for rule in step.spec.admit]
    gate = step.spec.approval
    if gate is not None:  # rendered as the step starts, and right before its first command
        start += [gate.required, gate.policy_check, gate.policy_reason]
    if step.loop is not None:
        start += [step.loop.in_, step.loop.max_in_flight]
    exit_ = [step.set, [(arc.when, arc.set, arc.args) for arc in step.next.arcs]]
    return model.StepReads(
        start=render.names_read(start),
        attempt=attempt_reads(step, workbook, keychain_reads),
        exit=render.names_read(exit_),
    )


def attempt_reads(
    step: model.Step,
    workbook: Mapping[str, model.WorkbookEntry],
    keychain_reads: frozenset[str] | None,
) -> frozenset[str] | None:
    """The names an attempt of `step` can read, or None (the whole context);
    `keychain_reads`: those of the playbook's keychain, which every attempt resolves."""
    if keychain_reads is None:
        return None
    values: list[Any] = [step.input]
    for task in step.tasks:
        tasks = [task]
        if task.kind == "workbook":  # the loader has checked that the entry exists
            tasks.append(workbook[str(task.config.get("name"))].task)
        for each in tasks:
            if each.kind == "python" and _sees_context(each.config):
                return None
            values += [each.input, each.config, each.set]
            if each.policy is not None:
                values += [(rule.when, rule.then.set) for rule in each.policy.rules]
    names = render.names_read(values)
    return None if names is None else names | keychain_reads


def playbook_reads(
    steps: Mapping[str, model.Step],
    workbook: Mapping[str, model.WorkbookEntry],
    keychain: Iterable[model.KeychainEntry],
) -> dict[str, model.StepReads]:
    """Every step's reads, for a playbook the loader has checked."""
    keychain_reads = render.names_read([(entry.map, entry.token) for entry in keychain])
    return {name: step_reads(step, workbook, keychain_reads) for name, step in steps.items()}


def _sees_context(config: Mapping[str, Any]) -> bool:
    """True when python code (`code`, or `script.source.code`) may read `context`."""
    return any("context" in text or is_template(text) for text in strings_in(config))
