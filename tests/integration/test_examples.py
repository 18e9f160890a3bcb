"""Every example validates without a warning and runs end to end as its header says."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from milepost.conformance.mock_api import MockServer
from milepost.core import state as st
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from tests.receiver import serve

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLAYBOOKS = sorted(EXAMPLES.glob("*.yaml"))


def run(tmp_path: Path, name: str, workload: dict[str, Any] | None = None) -> st.ExecutionState:
    path = EXAMPLES / f"{name}.yaml"
    store = SQLiteStore(tmp_path / "examples.db")

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=4) as engine:
            return await engine.run(load.load_file(path), path.read_text(), workload, timeout=60)

    try:
        return asyncio.run(go())
    finally:
        store.close()


def test_the_examples_are_all_here() -> None:
    # a new example is covered by the tests below only when it is listed in RUNS
    assert {p.stem for p in PLAYBOOKS} == set(RUNS) | {"approval"}


@pytest.mark.parametrize("path", PLAYBOOKS, ids=lambda p: p.stem)
def test_an_example_validates_without_a_warning(path: Path) -> None:
    playbook = load.load_file(path)
    assert playbook.warnings == ()
    assert playbook.path == f"examples/{path.stem}"


RUNS = {"hello_world": False, "parallel_loop": False, "branches": False, "flaky_retry": True,
        "demo": True}  # fmt: skip
"""The examples that run on their own, and whether they need the bundled mock API."""


@pytest.mark.parametrize("name", sorted(RUNS))
def test_an_example_runs_to_completion(tmp_path: Path, name: str) -> None:
    if RUNS[name]:
        with MockServer() as api:
            state = run(tmp_path, name, {"api_url": api.url})
    else:
        state = run(tmp_path, name)
    assert state.status == st.COMPLETED, state.error


def test_the_refund_example_under_the_limit_is_sent_at_once_without_approval(
        tmp_path: Path) -> None:  # fmt: skip
    with serve() as refunds:
        refunds.reply = {"refund_id": "R-1", "status": "sent"}
        state = run(tmp_path, "approval", {"refund_api": refunds.url, "amount": 800})
    assert state.status == st.COMPLETED, state.error
    [sent] = refunds.received
    assert sent.path == "/refunds"
    assert sent.json == {"order": "A-1042", "amount": 800, "reason": "arrived damaged"}
    assert "idempotency-key" in sent.headers  # the receiver can tell a repeat
    assert state.results["done"] == {"order": "A-1042",
                                     "refund": {"refund_id": "R-1", "status": "sent"}}
