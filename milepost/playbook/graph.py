"""The step graph: arcs between steps, the entry step, compensations, teardown steps, joins
and reaches.

Arcs, compensations and teardown steps are collected while steps are checked one by one; the checks
that need the whole graph (reachability, joins) run once every step is known.
A join is a step with arcs from more than one step; its `reaches` are the steps it may
still be waiting for (DSL 8).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from milepost.playbook import problems


@dataclass
class StepGraph:
    arcs: dict[str, list[str]] = field(default_factory=dict)
    """Step -> the steps its kept arcs lead to, in order."""
    compensation: dict[str, tuple[str, problems.Where]] = field(default_factory=dict)
    """Step -> its `spec.compensation` target, and where that was written."""
    teardown: list[tuple[str, problems.Where]] = field(default_factory=list)
    """`executor.spec.teardown`'s steps in order, and where each was written."""


def entry_step(names: list[str], wanted: str | None, known: set[str], root: problems.Where) -> str:
    """`executor.spec.entry_step`, else `start`, else the first step (with a warning)."""
    if wanted is not None:
        if wanted not in known:
            (root / "executor" / "spec" / "entry_step").error(f"unknown step {wanted!r}")
        return wanted
    if "start" in known:
        return "start"
    if names:
        root.warn(
            f"no step 'start' and no executor.spec.entry_step: "
            f"the first step {names[0]!r} is the entry step"
        )
        return names[0]
    return "start"


def check(
    graph: StepGraph, entry: str, known: set[str], steps: list[tuple[str, problems.Where]]
) -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """Check compensations, teardown steps and reachability; return (joins, reaches of each
    join)."""
    reachable = _reachable(graph.arcs, entry)
    _check_compensations(graph, entry, known, reachable)
    _check_teardown(graph, entry, known, reachable)
    # steps that run only as compensations or as teardown are unreachable by design
    apart = {t for t, _ in graph.compensation.values()} | {t for t, _ in graph.teardown}
    for name, w in steps:
        if name not in reachable and name not in apart and entry in known:
            w.warn(f"not reachable from the entry step {entry!r}")
    sources: dict[str, set[str]] = {}
    for src, targets in graph.arcs.items():
        for target in targets:
            sources.setdefault(target, set()).add(src)
    joins = frozenset(t for t, s in sources.items() if len(s) > 1)
    return joins, {j: _reaches(sources, j) for j in sorted(joins)}


def _check_compensations(
    graph: StepGraph, entry: str, known: set[str], reachable: set[str]
) -> None:
    # DSL 10.5: a compensation step only ever runs as one, when a failed or cancelled run
    # is undone; reached through arcs it would also run as an ordinary step, and a
    # compensation is never compensated in turn.
    for step, (target, w) in graph.compensation.items():
        if target not in known:
            w.error(f"unknown step {target!r}")
        elif target == step:
            w.error("a step cannot compensate itself")
        elif target in reachable:
            w.error(
                f"step {target!r} is reachable through arcs from the entry step "
                f"{entry!r}; a compensation step must only run as a compensation"
            )
        elif target in graph.compensation:
            w.error(f"step {target!r} has a compensation itself")


def _check_teardown(graph: StepGraph, entry: str, known: set[str], reachable: set[str]) -> None:
    # a teardown step runs once, after the run's outcome is decided: reached through arcs
    # it would also run as an ordinary step; as a compensation it would run twice or not
    # at all; compensated, it would be undone by the run it cleans up after
    compensates: dict[str, str] = {}  # compensation step -> the first step it undoes
    for step, (target, _) in graph.compensation.items():
        compensates.setdefault(target, step)
    listed: set[str] = set()
    for target, w in graph.teardown:
        if target not in known:
            w.error(f"unknown step {target!r}")
        elif target in listed:
            w.error(f"step {target!r} is listed twice; a teardown step runs once")
        elif target in reachable:
            w.error(
                f"step {target!r} is reachable through arcs from the entry step "
                f"{entry!r}; a teardown step must only run as teardown"
            )
        elif target in compensates:
            w.error(
                f"step {target!r} is the compensation of step {compensates[target]!r}; "
                "a teardown step cannot also be a compensation"
            )
        elif target in graph.compensation:
            w.error(f"step {target!r} has a spec.compensation; a teardown step is never undone")
        listed.add(target)


def _reachable(arcs: dict[str, list[str]], start: str) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for target in arcs.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _reaches(sources: dict[str, set[str]], join: str) -> frozenset[str]:
    """Steps from which `join` is reachable along arcs without passing through it."""
    seen: set[str] = set()
    todo = [join]
    while todo:
        for src in sources.get(todo.pop(), ()):
            if src != join and src not in seen:
                seen.add(src)
                todo.append(src)
    return frozenset(seen)
