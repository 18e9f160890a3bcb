"""`spec.pool` and `executor.spec.pool` (DSL 10.6): which workers run a step's commands.

A step's pool is its own `spec.pool`, else `executor.spec.pool`, else `default`; its
commands go to workers started with `--pool <name>`. A tool's own `pool:` field (NoETL's
postgres tool) is a connection-pool setting, not this (`playbook.tools` ignores it).
"""

from __future__ import annotations

import re
from typing import Any

from milepost.playbook import problems

DEFAULT = "default"
"""The pool of a step that names none, and of a worker started without `--pool`."""

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
"""Letters, digits, `-`, `_`, `.`: safe in a NATS subject token and a worker's flag."""


def valid(name: str) -> bool:
    return bool(_NAME_RE.match(name))


def check(raw: Any, w: problems.Where) -> str | None:
    """A pool name, or None (a problem at `w`) when it is not one."""
    if isinstance(raw, str) and valid(raw):
        return raw
    w.error(
        f"invalid pool name {raw!r} (a non-empty name of letters, digits, '-', '_' "
        "and '.', at most 100)"
    )
    return None


def of_step(spec_pool: str | None) -> str:
    """The pool a step's commands go to (its spec's, already defaulted from the executor)."""
    return spec_pool or DEFAULT


def issued_payload(pool: str) -> dict[str, Any]:
    """The `pool` field of a `command.issued`: absent for the default pool, so the logs of
    runs that name no pool are what they always were."""
    return {} if pool == DEFAULT else {"pool": pool}
