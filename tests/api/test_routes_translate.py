"""Routes only translate between the wire and the engine service: none reaches the store."""

from __future__ import annotations

import ast
from pathlib import Path

import milepost.api.routers as routers

ROUTERS = sorted(Path(routers.__file__).parent.glob("*.py"))


def _imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_routers_are_found() -> None:
    assert {p.stem for p in ROUTERS} >= {"commands", "events", "executions", "catalog"}


def test_no_router_imports_the_store() -> None:
    offenders = {
        path.name: sorted(
            name
            for name in _imports(ast.parse(path.read_text()))
            if name == "milepost.store" or name.startswith("milepost.store.")
        )
        for path in ROUTERS
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_no_router_reaches_the_store_through_a_dependency() -> None:
    """`services.store`, `engine.store`, a `StoreDep` parameter: all are the store."""
    offenders: dict[str, list[int]] = {}
    for path in ROUTERS:
        for node in ast.walk(ast.parse(path.read_text())):
            reaches = (isinstance(node, ast.Attribute) and node.attr == "store") or (
                isinstance(node, ast.Name) and node.id in {"StoreDep", "get_store"}
            )
            if reaches:
                offenders.setdefault(path.name, []).append(node.lineno)
    assert offenders == {}


def test_the_check_sees_a_store_import() -> None:
    tree = ast.parse("from milepost.store import port\nx = services.store.load(1)\n")
    assert "milepost.store" in _imports(tree)
    assert any(isinstance(n, ast.Attribute) and n.attr == "store" for n in ast.walk(tree))
