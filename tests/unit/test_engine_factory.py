"""One engine, one factory (`engine/factory.py`): every transport's engine is made by
`build_engine`, and what differs between them is a parameter of it."""

from __future__ import annotations

import ast
from pathlib import Path

from milepost.engine.factory import Lease, build_engine, given
from milepost.engine.locks import ExecutionLocks, NoLocks
from milepost.engine.meters import ApprovalClock, Meters
from milepost.ids import machine_of
from milepost.settings import Settings
from milepost.store.memory import MemoryStore

ROOT = Path(__file__).resolve().parents[2] / "milepost"
FACTORY = ROOT / "engine" / "factory.py"
BUILT_BY_THE_FACTORY = {"Lifecycle", "Orchestrator", "LeasedIds"}


def constructions(path: Path) -> list[str]:
    """`file:line name` of each call of a class the factory alone builds."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = (
            func.id
            if isinstance(func, ast.Name)
            else func.attr
            if isinstance(func, ast.Attribute)
            else None
        )
        if name in BUILT_BY_THE_FACTORY:
            found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {name}(")
    return found


def test_only_the_factory_builds_an_engine() -> None:
    elsewhere = [
        hit for path in sorted(ROOT.rglob("*.py")) if path != FACTORY for hit in constructions(path)
    ]
    assert elsewhere == []
    # the check sees what it looks for: the factory itself builds all three
    assert {hit.rsplit(" ", 1)[1] for hit in constructions(FACTORY)} == {
        f"{name}(" for name in BUILT_BY_THE_FACTORY
    }


def test_a_reader_leases_nothing_and_mints_on_machine_id_zero() -> None:
    store = MemoryStore()
    engine = build_engine(store, given(default_timeout=None), clock=lambda: 1000.0)
    assert engine.machine_ids is None
    assert store.machine_leases() == []
    assert machine_of(engine.new_id()) == 0
    assert isinstance(engine.locks, ExecutionLocks) and engine.refresh


def test_a_lease_is_taken_and_the_ids_are_made_on_it() -> None:
    store = MemoryStore()
    engine = build_engine(store, given(), clock=lambda: 1000.0, lease=Lease("server"))
    assert engine.machine_ids is not None
    [lease] = store.machine_leases()
    assert lease.machine_id == engine.machine_ids.machine_id
    assert lease.holder.startswith("server:")
    assert machine_of(engine.new_id()) == engine.machine_ids.machine_id


def test_a_machine_id_set_is_leased_and_minted_on() -> None:
    store = MemoryStore()
    engine = build_engine(
        store, given(machine_id=7), clock=lambda: 1000.0, lease=Lease("cancel", ttl=30.0)
    )
    assert engine.machine_ids is not None and engine.machine_ids.machine_id == 7
    assert machine_of(engine.new_id()) == 7


def test_the_differences_are_parameters() -> None:
    store = MemoryStore()
    settings = Settings.model_construct(default_timeout=60.0, requeue_notice_after=9.0)
    embedded = build_engine(store, settings, exclusive=True)
    assert isinstance(embedded.locks, NoLocks) and not embedded.refresh
    assert embedded.reconciler.default_timeout == 60.0
    assert embedded.reconciler.requeue_after == 9.0
    assert not embedded.orchestrator.shared

    seen: list[object] = []
    server = build_engine(store, settings, shared=True, listeners=[seen.append])
    assert server.orchestrator.shared
    assert server.listeners[-1] == seen.append  # after the engine's own

    metered = build_engine(store, settings, meters=Meters())
    assert any(isinstance(listener, ApprovalClock) for listener in metered.listeners)
