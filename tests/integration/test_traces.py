"""Causality and spans of an embedded run, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from milepost import telemetry
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store.postgres import PostgresStore
from milepost.store.sqlite import SQLiteStore
from tests import traces
from tests.pg import PgDatabases, session_databases

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/traced}\n"


@pytest.fixture(scope="module")
def pg() -> Iterator[PgDatabases]:
    yield from session_databases("milepost_traces")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        s: Any = SQLiteStore(tmp_path / "traces.db")
        yield s
        s.close()
        return
    dbs: PgDatabases = request.getfixturevalue("pg")
    url = dbs.create()
    s = PostgresStore(url, min_size=1, max_size=2)
    try:
        yield s
    finally:
        s.close()
        dbs.drop(url)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from traces.exporting()


def _run(store: Any) -> int:
    text = HEADER + traces.CHAIN.lstrip("\n")

    async def main() -> int:
        async with EmbeddedEngine(store, machine_id=3) as engine:
            state = await engine.run(load.load_text(text), text, timeout=60)
        assert state.status == "COMPLETED", state.error
        return state.execution_id

    return asyncio.run(main())


def test_an_embedded_run_logs_each_events_cause_and_spans_the_run_and_each_attempt(
        store: Any, spans: InMemorySpanExporter) -> None:  # fmt: skip
    xid = _run(store)
    events = store.load(xid)
    traces.assert_chain(events)
    traces.assert_spans(spans.get_finished_spans(), events)


def test_without_an_exporter_a_run_still_logs_its_causes_and_makes_no_span(store: Any) -> None:
    assert telemetry.active() is None
    xid = _run(store)
    traces.assert_chain(store.load(xid))
