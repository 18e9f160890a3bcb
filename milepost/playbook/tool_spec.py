"""Tool fields written under `tool.spec` (DSL 12): `spec: {method, url, code, input}`
is how older NoETL playbooks place them. They are lifted to the tool, with a warning
naming each, before aliases and the unknown-field check run, so a lifted field is
treated exactly like one written on the tool. The keys a task's spec really holds stay.
"""

from __future__ import annotations

from typing import Any

from milepost.playbook import problems

TASK_SPEC_KEYS = ("policy", "timeout", "retry")
"""What `tool.spec` itself means (task_policy: `policy`, `timeout`; `retry` is rejected
there with its own message): never lifted."""


def lift(raw: dict[str, Any], w: problems.Where) -> dict[str, Any]:
    """`raw` (the tool mapping at `w`) with its spec's tool fields moved beside `kind`;
    `raw` itself when there are none. A field given both places is an error."""
    spec = raw.get("spec")
    if not isinstance(spec, dict) or all(k in TASK_SPEC_KEYS for k in spec):
        return raw
    lifted = dict(raw)
    kept: dict[str, Any] = {}
    for key, value in spec.items():
        if key in TASK_SPEC_KEYS:
            kept[key] = value
            continue
        sw = w / "spec" / key
        if key in raw:
            sw.error(f"{key!r} is given both on the tool and in its spec: keep the tool's")
            continue
        sw.warn(f"'spec.{key}' is deprecated: write {key!r} on the tool", show="parent")
        (w / key).alias_line(sw)  # later messages about it point at the line written
        lifted[key] = value
    lifted["spec"] = kept
    return lifted
