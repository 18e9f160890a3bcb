"""Tool field aliases NoETL playbooks write (DSL 12): each is renamed, in the tool's
config, to the field milepost's tool reads, so the tools, the credential look-ahead of the
workers (`worker.remote_credentials`) and every later check see one name.

These aliases are accepted without a warning (NoETL's engines take them as their own
fields); the legacy ones of DSL 11 (`endpoint`, `data`) warn, through `legacy`.
"""

from __future__ import annotations

from typing import Any

from milepost.playbook import problems

ALIASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "duckdb": (("query", "command"), ("commands", "cmds", "queries", "cmd")),
    "shell": (("command", "cmds"), ("cmd",)),
    "postgres": (("auth",), ("credential",)),
}
"""Per kind: the fields an alias may not be given beside (the first is the one it stands
for), and the aliases. `cmds` is not an alias of shell's `command` (each of its commands
runs on its own) but cannot be given with it either."""


def apply(config: dict[str, Any], kind: str, w: problems.Where) -> None:
    """Rename the kind's aliases in `config`, in place."""
    group = ALIASES.get(kind)
    if group is None:
        return
    fields, aliases = group
    given = [name for name in (*fields, *aliases) if name in config]
    for alias in aliases:
        if alias not in config:
            continue
        if len(given) > 1:
            others = ", ".join(repr(name) for name in given if name != alias)
            (w / alias).error(
                f"{alias!r} is an alias of {fields[0]!r}: give only one of them "
                f"(also given: {others})",
                show="parent",
            )
            config.setdefault(fields[0], config.pop(alias))  # no second "is required"
            return
        rename(config, w, alias, fields[0])


def rename(
    config: dict[str, Any], w: problems.Where, old: str, new: str, *, legacy: bool = False
) -> None:
    """`config[old]` moved to `config[new]`, messages about it pointing at `old`'s line; an
    error when both are given; a deprecation warning for a `legacy` alias."""
    if old not in config:
        return
    if new in config:
        (w / old).error(
            f"both {new!r} and its {'legacy ' if legacy else ''}alias {old!r} are given"
        )
        return
    if legacy:
        (w / old).warn(f"{old!r} is deprecated: use {new!r}", show="parent")
    config[new] = config.pop(old)
    (w / new).alias_line(w / old)
