"""The suite as written: the entries of `expectations.yaml` (read, selected, checked for
mistakes) and every playbook of `playbooks/`, loaded once (`Catalog`)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from milepost.conformance.results import SuiteError
from milepost.engine.embedded import EmbeddedEngine
from milepost.errors import PlaybookInvalid
from milepost.playbook import load, model, scripts, yamllines

ENTRY_KEYS = frozenset(
    {
        "playbook",
        "needs",
        "workload",
        "credentials",
        "requires_playbooks",
        "timeout_s",
        "note",
        "expect",
    }
)
EXPECT_KEYS = frozenset(
    {
        "status",
        "steps_run",
        "steps_include",
        "steps_not_run",
        "steps_failed",
        "one_of",
        "run_counts",
        "results",
        "error_matches",
        "child_executions",
        "db_checks",
    }
)


def read_expectations(root: Path) -> list[dict[str, Any]]:
    path = root / "expectations.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SuiteError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, list) or not all(
        isinstance(e, dict) and isinstance(e.get("playbook"), str) for e in data
    ):
        raise SuiteError(f"{path}: expected a list of entries, each with a `playbook` path")
    return data


def select(entries: list[dict[str, Any]], only: list[str] | None) -> list[dict[str, Any]]:
    if not only:
        return entries

    def hit(pattern: str, playbook: str) -> bool:
        return (
            pattern == playbook
            or fnmatch.fnmatchcase(playbook, pattern)
            or Path(playbook).stem == pattern
        )

    unused = [p for p in only if not any(hit(p, e["playbook"]) for e in entries)]
    if unused:
        raise SuiteError(f"no entry matches {', '.join(unused)}")
    return [e for e in entries if any(hit(p, e["playbook"]) for p in only)]


def needs(entry: dict[str, Any]) -> list[str]:
    needs = entry.get("needs") or []
    return [str(n) for n in needs] if isinstance(needs, list) else [str(needs)]


def entry_problems(entry: dict[str, Any], root: Path, catalog: Catalog) -> list[str]:
    """Mistakes in the entry itself; reported as failures so that a typo cannot pass."""
    problems = [f"unknown entry field {k!r}" for k in entry if k not in ENTRY_KEYS]
    expect = entry.get("expect")
    if not isinstance(expect, dict) or "status" not in expect:
        problems.append("entry has no expect.status")
    else:
        problems += [f"unknown expectation {k!r}" for k in expect if k not in EXPECT_KEYS]
    name = entry["playbook"]
    if name not in catalog.loaded and name not in catalog.rejected:
        problems.append(f"no playbook {root / 'playbooks' / name}")
    for required in entry.get("requires_playbooks") or []:
        if required in catalog.rejected:
            problems.append(
                f"required playbook {required} is rejected: {catalog.rejected[required].message}"
            )
        elif required not in catalog.loaded:
            problems.append(f"required playbook {required} not found")
    return problems


@dataclass
class Catalog:
    """Every playbook of the suite, loaded once: relative path -> (text, playbook) or error."""

    root: Path
    loaded: dict[str, tuple[str, model.Playbook]]
    rejected: dict[str, PlaybookInvalid]

    @classmethod
    def load(cls, root: Path) -> Catalog:
        loaded: dict[str, tuple[str, model.Playbook]] = {}
        rejected: dict[str, PlaybookInvalid] = {}
        limits = yamllines.Limits.of()
        for path in sorted([*root.rglob("*.yaml"), *root.rglob("*.yml")]):
            rel = path.relative_to(root).as_posix()
            try:
                text = path.read_text(encoding="utf-8")
                text = scripts.inline_text(text, path.parent, str(path), limits=limits)
                loaded[rel] = (text, load.load_text(text, str(path), limits))
            except PlaybookInvalid as exc:
                rejected[rel] = exc
            except OSError as exc:
                rejected[rel] = PlaybookInvalid([f"cannot read {path}: {exc}"], str(path))
        return cls(root, loaded, rejected)

    def register_all(self, engine: EmbeddedEngine) -> None:
        for text, playbook in self.loaded.values():
            engine.orchestrator.register(text, playbook)
