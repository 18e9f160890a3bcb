"""The package graph of `milepost/`: layers that only import downwards, and one layout.

Every import is read with `ast` (function-level and `TYPE_CHECKING` ones too: a lazy
import is still a dependency) and mapped to the layer of the module it names. A module
may import its own unit and any unit of a lower tier; an import of a higher tier, or of
another unit of the same tier (two transports, say), fails the test with the file, line
and imported module.

The same reading keeps the making of events in `core/`: a call of `Event(` or
`new_event(` anywhere else fails with its file and line (issue 34).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "milepost"

TIERS: list[tuple[str, ...]] = [
    # the id layout (imports nothing; settings bounds the machine id with it), errors and
    # the dataclass of the values made on every step
    ("milepost", "milepost.errors", "milepost.core.ids", "milepost.records"),
    # configuration and redaction, read by every layer above
    ("milepost.settings", "milepost.sanitize"),
    # the playbook language: model, loading, templates
    ("milepost.playbook",),
    # the fold, decide and what a worker is handed and reports (pure)
    ("milepost.core",),
    # ports to the outside world, each on its own: the log, credentials at rest, tools,
    # the wire shape of commands and reports, and the spans of runs and attempts
    (
        "milepost.store",
        "milepost.credentials",
        "milepost.tools",
        "milepost.wire",
        "milepost.telemetry",
    ),
    # running one attempt (below both transports), and the server's HTTP client
    ("milepost.attempt", "milepost.client"),
    # the engine: the run lifecycle over a store
    ("milepost.engine",),
    # the two transports of the engine's commands: the HTTP server and the remote worker
    ("milepost.api", "milepost.worker"),
    # entry points, each may use the ones before it
    ("milepost.conformance",),
    ("milepost.bench",),
    # the fault suite: an installation of server and workers under faults
    ("milepost.verify",),
    ("milepost.cli",),
]
"""Lowest first. A unit is a module or package; a module belongs to its longest unit."""

_TIER_OF = {unit: index for index, units in enumerate(TIERS) for unit in units}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str | None:
    """The longest unit `module` is or lies inside; None for a module no tier places."""
    if module == "milepost":
        return module  # the package itself (its version), not everything inside it
    parts = module.split(".")
    for end in range(len(parts), 1, -1):
        candidate = ".".join(parts[:end])
        if candidate in _TIER_OF:
            return candidate
    return None


def _is_module(name: str) -> bool:
    base = ROOT.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path, package: str) -> Iterator[tuple[int, str]]:
    """(line, module) for every milepost module `path` imports, wherever the import is;
    `package` is the package relative imports start from."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "milepost":
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            if source.split(".")[0] != "milepost":
                continue
            for alias in node.names:
                # `from milepost.core import state` imports the module `milepost.core.state`
                target = f"{source}.{alias.name}"
                yield node.lineno, target if _is_module(target) else source


def against_the_order(importer: str, imports: Iterator[tuple[int, str]]) -> list[str]:
    """`line: importer imports target, ...` for each import of `importer` against the order."""
    unit = unit_of(importer)
    if unit is None:
        return [f"{importer} is in no tier of TIERS"]
    found = []
    for line, target in imports:
        target_unit = unit_of(target)
        if target_unit == unit:
            continue
        if target_unit is None:
            found.append(f"{line}: {importer} imports {target}, which is in no tier")
        elif _TIER_OF[target_unit] == _TIER_OF[unit]:
            found.append(f"{line}: {importer} imports {target}, a peer of {unit}")
        elif _TIER_OF[target_unit] > _TIER_OF[unit]:
            found.append(f"{line}: {importer} imports {target}, above {unit}")
    return found


def modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def test_every_import_goes_down_the_tiers() -> None:
    found = []
    for path in modules():
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found += [
            f"{path.relative_to(ROOT.parent)}:{problem}"
            for problem in against_the_order(name, imports_of(path, package))
        ]
    assert found == []


def test_the_check_finds_upward_peer_and_lazy_imports(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "import milepost.engine.orchestrator\n"
        "from milepost.playbook import model\n"
        "from milepost import errors, worker\n\n"
        "def f():\n    from milepost.api import app\n"
        "    from .state import fold\n"
    )
    imports = list(imports_of(source, "milepost.core"))
    assert imports == [
        (1, "milepost.engine.orchestrator"),
        (2, "milepost.playbook.model"),
        (3, "milepost.errors"),
        (3, "milepost.worker"),
        (6, "milepost.api.app"),
        (7, "milepost.core.state"),
    ]
    assert against_the_order("milepost.core.decide", iter(imports)) == [
        "1: milepost.core.decide imports milepost.engine.orchestrator, above milepost.core",
        "3: milepost.core.decide imports milepost.worker, above milepost.core",
        "6: milepost.core.decide imports milepost.api.app, above milepost.core",
    ]
    assert against_the_order("milepost.api.app", iter([(9, "milepost.worker.loop")])) == [
        "9: milepost.api.app imports milepost.worker.loop, a peer of milepost.api"
    ]
    assert against_the_order("milepost.nowhere", iter([])) == [
        "milepost.nowhere is in no tier of TIERS"
    ]


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
