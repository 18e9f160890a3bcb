"""Legacy and rejected forms (DSL 11): the rewrites of a step's or a tool's own fields,
and the message for each rejected key.

Rewrites warn and name the step. Legacy forms that belong to one section (a `next`
list of arcs, `args`/`data` as input, `loop.mode`, `else:` without `then:`) are
rewritten where that section is checked.
"""

from __future__ import annotations

from typing import Any

from milepost.playbook import problems, tool_aliases

REJECTED = {
    "case": "`case:` is not supported: routing belongs in `next.arcs`, result handling "
    "in `tool.spec.policy.rules`",
    "vars": "`vars:` is not supported: use `set: {ctx.<name>: ...}`",
    "sink": "`sink:` is not supported: add a storage task (e.g. kind: postgres) to the pipeline",
    "save": "`save:` is not supported: add a storage task (e.g. kind: postgres) to the pipeline",
    "retry": "`retry:` is not supported here: use a policy rule "
    "(`tool.spec.policy.rules` with `do: retry`) or step `spec.retry`",
    "eval": "`eval:` is not supported: use policy rules (`tool.spec.policy.rules[].when`)",
    "expr": "`expr:` is not supported: use policy rules (`tool.spec.policy.rules[].when`)",
}
"""Keys that are refused wherever they appear, with what to use instead."""

REPORTED = object()
"""Stands for a tool whose problem is already reported."""
UNSUPPORTED = object()
"""Stands for a python `script` already reported as unsupported."""


def step_tool(raw: dict[str, Any], w: problems.Where) -> tuple[Any, problems.Where] | None:
    """The tool of a step written in a legacy form (or a broken `type:`), with where it
    sits; None when the step has neither `type:` nor `tool: python` with its own `code`."""
    if "type" in raw:
        return _step_type(raw, w)
    if raw.get("tool") == "python" and "code" in raw:
        w.warn("legacy 'tool: python' with step-level 'code' rewritten to tool: {kind: python}")
        return python_tool(raw, w, w / "tool"), w / "tool"
    return None


def _step_type(raw: dict[str, Any], w: problems.Where) -> tuple[Any, problems.Where]:
    tool = raw.get("tool")
    tw = w / "tool"
    if raw["type"] != "python":
        (w / "type").error(
            f"unknown field 'type' (use tool: {{kind: {raw['type']}, ...}})",
            show="parent",
        )
        return (tool if "tool" in raw else REPORTED), tw
    if "tool" in raw:
        (w / "type").error("legacy 'type: python' cannot be combined with 'tool'")
        return tool, tw
    w.warn("legacy 'type: python' with step-level 'code' rewritten to tool: {kind: python}")
    return python_tool(raw, w, w / "type"), tw


def python_tool(raw: dict[str, Any], w: problems.Where, origin: problems.Where) -> dict[str, Any]:
    """`tool: {kind: python}` built from a step's own `code` and `libs`; messages about the
    new fields point at the lines they were written on."""
    tool: dict[str, Any] = {"kind": "python"}
    (w / "tool").alias_line(origin)
    for key in ("code", "libs"):
        if key in raw:
            tool[key] = raw[key]
            (w / "tool" / key).alias_line(w / key)
    return tool


def http_aliases(config: dict[str, Any], w: problems.Where) -> None:
    """http `endpoint`/`data` (legacy) and `payload` (DSL 12) -> `url`/`body`, in place."""
    for old, new in (("endpoint", "url"), ("data", "body")):
        tool_aliases.rename(config, w, old, new, legacy=True)
    tool_aliases.rename(config, w, "payload", "body")


def inline_script(config: dict[str, Any], w: problems.Where) -> None:
    """python `script: {source: {type: inline, code}}` -> `code`, in place. Any other
    script stays in `config`, which tells later checks it was already reported."""
    sw = w / "script"
    script = config.pop("script")
    source = script.get("source") if isinstance(script, dict) else None
    if not isinstance(source, dict) or source.get("type") != "inline":
        sw.error("only 'script: {source: {type: inline, code: ...}}' is supported")
        config["script"] = UNSUPPORTED  # reported: no second "code is required"
    elif "code" in config:
        sw.error("'script' and 'code' cannot both be given")
    elif not isinstance(source.get("code"), str):
        (sw / "source" / "code").error("expected the python code as a string")
    else:
        config["code"] = source["code"]
