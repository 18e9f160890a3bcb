"""YAML -> validated, normalized `Playbook` (DSL.md sections 1-11).

`load_file`/`load_text` parse with PyYAML safe loading and remember the line of every
mapping key and sequence item, so each message can end in `(line N)`. `load_data` checks
the whole document, rewrites legacy forms (with a warning naming the step) and raises one
`PlaybookInvalid` listing every problem. Warnings end up in `Playbook.warnings` and in the
log; they are never raised through `warnings.warn`.

Messages read `<scope>: <field path>: <text> (line N)`, where the scope is `step 'x'`,
`workbook 'x'` or absent at the root: `step 'fetch': next.arcs[1].step: unknown step
'fetch_pgae' (line 42)`.

This module is the entry point and runs the sections in document order; the checks
live in modules named after what they check: `yamllines` (reading with line numbers),
`problems` (messages), `fields` and `durations` (single values), `document` (root,
metadata, executor, keychain), `steps`, `tools`, `task_policy`, `routing`,
`step_spec`, `teardown`, `legacy` and `graph`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NoReturn

from milepost.errors import PlaybookInvalid
from milepost.playbook import (
    document,
    fields,
    graph,
    model,
    problems,
    reads,
    scripts,
    steps,
    teardown,
    tools,
    yamllines,
)
from milepost.playbook.context import LoadContext, RawStep
from milepost.playbook.document import API_VERSION
from milepost.playbook.durations import parse_duration
from milepost.playbook.problems import LinePath
from milepost.playbook.tools import TOOL_KINDS

__all__ = [
    "API_VERSION",
    "TOOL_KINDS",
    "LinePath",
    "load_data",
    "load_file",
    "load_text",
    "parse_duration",
]

logger = logging.getLogger(__name__)


def load_file(path: str | Path, limits: yamllines.Limits | None = None) -> model.Playbook:
    """Load and validate the playbook stored at `path`, within `limits` (default: the
    settings'): a file is read from outside, like a registered document.

    Raises:
        PlaybookInvalid: listing every problem found (the file's path is the source).
    """
    p = Path(path)
    limits = limits or yamllines.Limits.of()
    try:
        refused = yamllines.too_big(p.stat().st_size, limits)  # before reading it
        if refused is not None:
            raise PlaybookInvalid([refused], str(p))
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaybookInvalid([f"cannot read {p}: {exc}"], str(p)) from exc
    text = scripts.inline_text(text, p.parent, str(p), limits=limits)
    return load_text(text, source=str(p), limits=limits)


def load_text(
    text: str, source: str | None = None, limits: yamllines.Limits | None = None
) -> model.Playbook:
    """Parse YAML `text` (safe loading) and validate it like `load_data`; `limits` bound
    the document's size and alias expansion. None: no bound, for text accepted under
    limits before (a catalog entry); where text comes from outside, pass
    `Limits.of(settings)`."""
    data, lines, found = yamllines.parse(text, limits)
    if data is None and found:
        raise PlaybookInvalid(found, source)
    return _load(LoadContext.new(lines, found), data, source)


def load_data(
    data: Any, source: str | None = None, lines: dict[tuple[Any, ...], int] | None = None
) -> model.Playbook:
    """Validate and normalize an already parsed playbook.

    Args:
        data: the parsed document (a mapping).
        source: where it came from, for messages.
        lines: optional `path tuple -> line` map (`('workflow', 2, 'tool')`) for messages.

    Raises:
        PlaybookInvalid: listing every problem found.
    """
    return _load(LoadContext.new(lines or {}, []), data, source)


def _load(ctx: LoadContext, data: Any, source: str | None) -> model.Playbook:
    if not isinstance(data, dict):
        ctx.root.error(f"a playbook must be a mapping, got {problems.type_name(data)}")
        _raise(ctx, source)
    parts = _sections(ctx, fields.mapping(data, ctx.root))
    if ctx.report.problems:
        _raise(ctx, source)
    # only for a playbook that loaded: its workbook entries exist, its templates are final
    parts["reads"] = reads.playbook_reads(parts["steps"], parts["workbook"], parts["keychain"])
    for text in ctx.report.warnings:
        logger.info("playbook %s: %s", source or parts["metadata"].get("name"), text)
    playbook = fields.build(
        ctx.root,
        model.Playbook,
        **parts,
        warnings=tuple(ctx.report.warnings),
        source=source,
    )
    if playbook is None:
        _raise(ctx, source)
    return playbook


def _sections(ctx: LoadContext, doc: dict[str, Any]) -> dict[str, Any]:
    """Check every section; return the `Playbook` fields built from them.

    The order matters beyond the order of messages: step and workbook names are
    collected before any step is checked, and the executor's defaults before any
    step spec; the graph is checked last, once every arc is known.
    """
    root = ctx.root
    document.check_root_keys(ctx, doc)
    metadata = document.metadata(ctx, doc)
    workload = fields.mapping(doc.get("workload"), root / "workload")
    ctx.executor = document.executor(ctx, doc.get("executor"), root / "executor")
    keychain = document.keychain(doc.get("keychain"), root / "keychain")
    raw_steps = steps.collect(ctx, doc, root / "workflow")
    workbook = tools.workbook(ctx, doc.get("workbook"), root / "workbook")
    built = _steps(ctx, raw_steps)
    names = [name for name, _, _ in raw_steps]
    entry = graph.entry_step(names, ctx.executor.entry_step, ctx.step_names, root)
    places = [(name, w) for name, _, w in raw_steps]
    teardown.check_steps(ctx, built, dict(places))
    joins, reaches = graph.check(ctx.graph, entry, ctx.step_names, places)
    return {
        "metadata": metadata,
        "workload": workload,
        "keychain": keychain,
        "executor": ctx.executor,
        "workbook": workbook,
        "steps": built,
        "entry_step": entry,
        "joins": joins,
        "reaches": reaches,
    }


def _steps(ctx: LoadContext, raw_steps: list[RawStep]) -> dict[str, model.Step]:
    built: dict[str, model.Step] = {}
    for name, raw, w in raw_steps:
        step = steps.check(ctx, raw, w, name)
        if step is not None:
            built[name] = step
    return built


def _raise(ctx: LoadContext, source: str | None) -> NoReturn:
    raise PlaybookInvalid(list(ctx.report.problems), source)
