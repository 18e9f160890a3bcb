"""The document's top level (DSL 1): root keys, `metadata`, `executor.spec` (the
playbook-wide defaults) and `keychain`. The workflow and workbook have modules of
their own."""

from __future__ import annotations

from typing import Any

from milepost.playbook import (
    budget,
    durations,
    fields,
    legacy,
    model,
    pools,
    problems,
    step_spec,
    teardown,
)
from milepost.playbook.context import LoadContext

API_VERSION = "noetl.io/v2"

_ROOT_KEYS = frozenset(
    {"apiVersion", "kind", "metadata", "workload", "keychain", "executor", "workbook", "workflow"}
)
_EXECUTOR_SPEC_KEYS = frozenset(
    {
        "entry_step",
        "no_next_is_error",
        "timeout",
        "retry",
        "liveness",
        "cancel_grace",
        "pool",
        "budget",
        "stall_after",
        "teardown",
    }
)
_ROOT_ELSEWHERE = {
    "finally": "`finally:` is written `executor.spec.teardown: [<step>, ...]`, with milepost's "
    "other extensions (the root keys are NoETL's)",
}
"""Root keys of milepost's own that live under `executor.spec`, with where."""
_KEYCHAIN_VALUE = {"credential": "credential", "static": "map", "bearer": "token", "secrets": "map"}
"""Keychain kind -> the field that holds its value."""
_KEYCHAIN_REJECTED = ("oauth2", "google_id_token")
"""NoETL keychain kinds that mint tokens; neither NoETL engine of today does it either."""


def check_root_keys(ctx: LoadContext, doc: dict[str, Any]) -> None:
    root = ctx.root
    version = doc.get("apiVersion")
    if "apiVersion" not in doc:
        root.error("field 'apiVersion' is required")
    elif version != API_VERSION:
        (root / "apiVersion").error(f"expected {API_VERSION!r}, got {version!r}")
    if "kind" in doc and doc["kind"] != "Playbook":
        (root / "kind").error(f"expected 'Playbook', got {doc['kind']!r}")
    for key in doc:
        if key in _ROOT_KEYS:
            continue
        w = root / key
        if key in legacy.REJECTED:
            w.error(legacy.REJECTED[key], show="parent")
        elif key in _ROOT_ELSEWHERE:
            w.error(_ROOT_ELSEWHERE[key], show="parent")
        else:
            w.error(f"unknown field {key!r}", show="parent")


def metadata(ctx: LoadContext, doc: dict[str, Any]) -> dict[str, Any]:
    """`metadata` with a usable `name` and `path` (`?` when missing or wrong)."""
    if "metadata" not in doc:
        ctx.root.error("field 'metadata' is required")
        return {"name": "?", "path": "?"}
    raw, w = doc["metadata"], ctx.root / "metadata"
    meta = fields.mapping(raw, w)
    name = meta.get("name")
    if not isinstance(raw, dict):
        name = "?"
    elif name is None:
        w.error("field 'name' is required")
        name = "?"
    elif not isinstance(name, str) or not name.strip():
        (w / "name").error(f"expected a non-empty string, got {name!r}")
        name = "?"
    path = meta.get("path", name)
    if not isinstance(path, str) or not path.strip():
        (w / "path").error(f"expected a non-empty string, got {path!r}")
        path = name
    return {**meta, "name": name, "path": path}


def executor(ctx: LoadContext, raw: Any, w: problems.Where) -> model.ExecutorSpec:
    """`executor.spec`; kept as written in `ctx.executor_raw` for messages about steps."""
    spec = fields.mapping(fields.mapping(raw, w).get("spec"), w / "spec")
    w = w / "spec"
    ctx.executor_raw = spec
    for key in spec:
        if key not in _EXECUTOR_SPEC_KEYS:
            (w / key).warn(f"field {key!r} is ignored", show="parent")
    kwargs = _executor_flags(spec, w)
    for key in ("timeout", "liveness"):
        if spec.get(key) is not None:
            kwargs[key] = durations.check(spec[key], w / key)
    if spec.get("cancel_grace") is not None:
        grace = durations.check(spec["cancel_grace"], w / "cancel_grace", positive=False)
        if grace is not None:
            kwargs["cancel_grace"] = grace
    if spec.get("retry") is not None:
        kwargs["retry"] = step_spec.retry(spec["retry"], w / "retry")
    if spec.get("pool") is not None:
        kwargs["pool"] = pools.check(spec["pool"], w / "pool")
    if spec.get("budget") is not None:  # usage past which the run fails (DSL 10.6)
        kwargs["budget"] = budget.parse(spec["budget"], w / "budget")
    if spec.get("stall_after") is not None:
        kwargs["stall_after"] = durations.check(spec["stall_after"], w / "stall_after")
    if spec.get("teardown") is not None:  # what runs once the outcome is decided
        kwargs["teardown"] = teardown.names(ctx, spec["teardown"], w / "teardown")
    liveness, timeout = kwargs.get("liveness"), kwargs.get("timeout")
    if liveness is not None and timeout is not None and liveness <= timeout:
        (w / "liveness").error(
            f"executor.spec.liveness ({durations.text(spec['liveness'])}) must be greater than "
            f"executor.spec.timeout ({durations.text(spec['timeout'])})",
            show="none",
        )
    return fields.build(w, model.ExecutorSpec, **kwargs) or model.ExecutorSpec()


def _executor_flags(spec: dict[str, Any], w: problems.Where) -> dict[str, Any]:
    """`entry_step` and `no_next_is_error`, as model keyword arguments."""
    kwargs: dict[str, Any] = {}
    entry = spec.get("entry_step")
    if entry is not None:
        if isinstance(entry, str):
            kwargs["entry_step"] = entry
        else:
            (w / "entry_step").error(f"expected a step name, got {problems.type_name(entry)}")
    if "no_next_is_error" in spec:
        if isinstance(spec["no_next_is_error"], bool):
            kwargs["no_next_is_error"] = spec["no_next_is_error"]
        else:
            (w / "no_next_is_error").error("expected a boolean")
    return kwargs


def keychain(raw: Any, w: problems.Where) -> tuple[model.KeychainEntry, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        w.error(f"expected a list, got {problems.type_name(raw)}")
        return ()
    entries: list[model.KeychainEntry] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        entry = _keychain_entry(fields.mapping(item, w / i), w / i, seen)
        if entry is not None:
            entries.append(entry)
    return tuple(entries)


def _keychain_entry(
    item: dict[str, Any], w: problems.Where, seen: set[str]
) -> model.KeychainEntry | None:
    name = fields.name(item.get("name"), w / "name", "keychain")
    if name in seen:
        (w / "name").error(f"duplicate keychain name {name!r}")
    seen.add(name or "")
    if item.get("kind") in _KEYCHAIN_REJECTED:
        (w / "kind").error(
            f"keychain kind {item['kind']!r} is not supported: milepost does not mint tokens; "
            "fetch the token in an http step (e.g. a POST to the token endpoint) and pass it "
            "on with `set`, or register it as a credential"
        )
        return None
    kind = fields.choice(item.get("kind"), w / "kind", _KEYCHAIN_VALUE)
    if kind is None or name is None:
        return None
    value_key = _KEYCHAIN_VALUE[kind]
    needed = (value_key, "provider") if kind == "secrets" else (value_key,)
    missing = [key for key in needed if item.get(key) is None]
    for key in missing:
        w.error(f"field {key!r} is required for kind {kind!r}")
    if missing:
        return None
    for key in item:
        if key not in ("name", "kind", *needed):
            (w / key).warn(f"field {key!r} is ignored", show="parent")
    value = item[value_key]
    if kind == "credential" and not isinstance(value, str):
        (w / "credential").error("expected a credential name")
        return None
    if kind in ("static", "secrets"):
        value = fields.mapping(value, w / "map")
    extra: dict[str, Any] = {}
    if kind == "secrets":
        extra["provider"] = fields.choice(item["provider"], w / "provider", model.SECRET_PROVIDERS)
        if extra["provider"] is None:
            return None
    return fields.build(w, model.KeychainEntry, name=name, kind=kind, **{value_key: value}, **extra)
