"""The operations of the `nats` tool (DSL 12.1) and the fields each needs: checked when a
playbook loads, and read again by the tool (`tools/nats_tool`) when the operation was a
template that only rendered at run time. In the playbook tier so the loader needs no
import of the tool (nor of nats-py)."""

from __future__ import annotations

from typing import Any

from milepost.playbook import problems
from milepost.playbook.coercion import is_template

REQUIRED: dict[str, tuple[str, ...]] = {
    "kv_get": ("bucket", "key"),
    "kv_put": ("bucket", "key", "value"),
    "kv_delete": ("bucket", "key"),
    "kv_keys": ("bucket",),
    "kv_purge": ("bucket", "key"),
    "object_get": ("bucket", "name"),
    "object_put": ("bucket", "name", "data"),
    "object_delete": ("bucket", "name"),
    "object_list": ("bucket",),
    "object_info": ("bucket", "name"),
    "js_publish": ("subject",),
    "js_get_msg": ("stream", "seq"),
    "js_stream_info": ("stream",),
}
"""Per operation, the fields it cannot run without (all of them)."""
OPTIONAL: dict[str, tuple[str, ...]] = {
    "kv_put": ("ttl",),
    "kv_keys": ("pattern",),
    "object_get": ("encoding",),
    "object_put": ("encoding", "description"),
    "js_publish": ("data", "headers", "stream"),
}
"""Per operation, the fields it reads beside the required ones (and `auth`)."""
OPERATIONS = tuple(REQUIRED)
FIELDS = frozenset(f for table in (REQUIRED, OPTIONAL) for fs in table.values() for f in fs)
"""Every field some operation reads."""
PAYLOADS = frozenset({"value", "data"})
"""Fields whose value may be anything, an empty string or null included: they only have
to be present."""


def missing(operation: str, config: dict[str, Any]) -> list[str]:
    """The required fields of `operation` that `config` lacks (empty names count as lacking)."""
    return [
        name
        for name in REQUIRED[operation]
        if name not in config or (name not in PAYLOADS and config[name] in (None, ""))
    ]


def check(config: dict[str, Any], w: problems.Where) -> None:
    """Report an unknown operation, or the fields it needs that are missing. A templated
    operation is checked when it renders (by the tool). `object` is the object's `name`
    (a task of a pipeline: there `name` names the task)."""
    if "object" in config and "name" not in config:
        config["name"] = config.pop("object")
    operation = config.get("operation")
    if operation is None or is_template(operation):
        return  # a missing one is reported as a required field of the kind
    if not isinstance(operation, str) or operation not in REQUIRED:
        (w / "operation").error(
            f"unknown nats operation {operation!r} (known: {', '.join(OPERATIONS)})"
        )
        return
    for name in missing(operation, config):
        w.error(f"field {name!r} is required for nats operation {operation!r}")
