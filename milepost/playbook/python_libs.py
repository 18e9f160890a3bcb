"""The python tool's `libs` (DSL 3.1, 12): what the code finds imported, never installed.

Three forms, as NoETL's engines accept them:
- `libs: {alias: module.name}`: `import module.name as alias`;
- `libs: {dt: {from: datetime, import: datetime}}`: `from datetime import datetime as dt`;
- `libs: [json, os.path]`: `import json`, `import os.path` (binds `os`).
"""

from __future__ import annotations

from typing import Any

from milepost.playbook import problems


def check(libs: Any, w: problems.Where) -> None:
    """Report a `libs` that is none of the three forms, naming the entry."""
    if isinstance(libs, list):
        for i, name in enumerate(libs):
            if not _dotted(name):
                (w / i).error(f"expected a module name such as 'json', got {name!r}")
        return
    if not isinstance(libs, dict):
        w.error(
            f"expected a mapping of aliases to modules or a list of modules, got "
            f"{problems.type_name(libs)}"
        )
        return
    for alias, spec in libs.items():
        aw = w / str(alias)
        if not isinstance(alias, str) or not alias.isidentifier():
            aw.error(f"{alias!r} is not a python name to import under")
        elif isinstance(spec, dict):
            if set(spec) != {"from", "import"}:
                aw.error("expected {from: module, import: name}")
            elif not _dotted(spec["from"]) or not _dotted(spec["import"], dots=False):
                aw.error(f"expected {{from: module, import: name}}, got {spec!r}")
        elif not _dotted(spec):
            aw.error("expected 'alias: module.name' or 'alias: {from: module, import: name}'")


def _dotted(name: Any, *, dots: bool = True) -> bool:
    if not isinstance(name, str) or not name:
        return False
    parts = name.split(".") if dots else [name]
    return all(p.isidentifier() for p in parts)
