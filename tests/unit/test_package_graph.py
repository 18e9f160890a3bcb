"""The package graph of `milepost/` and one layout.

The layers and the circles are import-linter's contracts (pyproject.toml, `make lint`).
What it cannot say is read here with `ast`: the making of events stays in `core/` (a call
of `Event(` or `new_event(` anywhere else fails with its file and line, issue 34), and the
formatter owns every line.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "milepost"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def test_the_import_contracts_hold() -> None:
    """The layers and the acyclic packages of `[tool.importlinter]` in pyproject.toml
    (`make lint` runs the same): a layer imports only those below it, the units of one
    layer (the two transports, say) not each other, and no module of a package imports
    back into a circle, function-level and `TYPE_CHECKING` imports counted."""
    lint = Path(sys.executable).with_name("lint-imports")
    checked = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT.parent, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


EVENTS = "milepost.core.events"
MAKERS = frozenset({"Event", "new_event"})
"""What makes an event: the record itself, and the constructor that defaults its fields."""


def _source_of(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for a name or a chain of attributes of a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def event_constructions(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, callee) for every call in `path` that makes a `core.events.Event`: `Event(`
    or `new_event(` reached through any import of `milepost.core.events` (the module
    aliased or not, or the names themselves, renamed or not). Read from the syntax tree:
    a comment or a string that mentions them is no call, and another `Event` (asyncio's,
    threading's) is not the log's."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    callees = {f"{EVENTS}.{name}" for name in MAKERS}  # `import milepost.core.events`
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == EVENTS and alias.asname:
                    callees |= {f"{alias.asname}.{name}" for name in MAKERS}
        elif isinstance(node, ast.ImportFrom):
            source = _source_of(node, package)
            for alias in node.names:
                bound = alias.asname or alias.name
                if f"{source}.{alias.name}" == EVENTS:
                    callees |= {f"{bound}.{name}" for name in MAKERS}
                elif source == EVENTS and alias.name in MAKERS:
                    callees.add(bound)
    return sorted(
        (node.lineno, callee)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and (callee := _dotted(node.func)) in callees
    )


def test_events_are_made_in_core_only() -> None:
    """Issue 34: the engine, the store, the API and the CLI ask; `core` decides what every
    event of a log is and makes it (a function named after its concept, ids and time
    passed in). An event made anywhere else fails here with its file, line and call."""
    found = []
    for path in modules():
        if path.is_relative_to(ROOT / "core"):
            continue
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found += [
            f"{path.relative_to(ROOT.parent)}:{line}: {callee}("
            for line, callee in event_constructions(path, package)
        ]
    assert found == []


def test_the_check_finds_every_way_to_make_an_event(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "import asyncio, threading\n"
        "import milepost.core.events\n"
        "import milepost.core.events as evs\n"
        "from milepost.core import events as ev\n"
        "from milepost.core.events import Event as E, new_event\n"
        "from . import events\n\n"
        "def f():\n"
        "    ev.new_event(1, 2, 'x', 0.0)  # ev.Event( in a comment\n"
        "    E(1, 2, 'x', 0.0)\n"
        "    new_event(1, 2, 'x', 0.0)\n"
        "    milepost.core.events.Event(1, 2, 'x', 0.0)\n"
        "    evs.Event(1, 2, 'x', 0.0)\n"
        "    events.new_event(1, 2, 'x', 0.0)\n"
        "    asyncio.Event(), threading.Event()\n"
        "    text = 'ev.new_event(1, 2)'\n"
        "    ev.to_json(ev.Event)\n"
    )
    assert event_constructions(source, "milepost.core") == [
        (9, "ev.new_event"),
        (10, "E"),
        (11, "new_event"),
        (12, "milepost.core.events.Event"),
        (13, "evs.Event"),
        (14, "events.new_event"),
    ]


def test_the_formatter_owns_the_layout() -> None:
    """`ruff format` decides every line's form: no line opts out of it (a skip
    marker kept a hand-made layout that the next formatted edit around it fought), and
    nothing in the tree is left unformatted. Modules are as long as their concept needs:
    there is no size rule to split them by."""
    tree = ROOT.parent
    marker = "fmt: " + "skip"  # spelled apart so this file does not match itself
    skipped = [
        f"{path.relative_to(tree)}:{n}"
        for folder in ("milepost", "tests", "examples")
        for path in sorted((tree / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if marker in line
    ]
    assert skipped == []
    ruff = Path(sys.executable).with_name("ruff")
    checked = subprocess.run(
        [str(ruff), "format", "--check", "milepost", "tests", "examples"],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
