"""Causality and spans of an embedded run, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from milepost import telemetry
from milepost.core import tracecontext as tc
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from tests import traces
from tests.integration import stores
from tests.pg import PgDatabases, session_databases

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/traced}\n"


@pytest.fixture(scope="module")
def pg() -> Iterator[PgDatabases]:
    yield from session_databases("milepost_traces")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    yield from stores.either(request, tmp_path / "traces.db", max_size=2)


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
    store: Any, spans: InMemorySpanExporter
) -> None:
    xid = _run(store)
    events = store.load(xid)
    traces.assert_chain(events)
    traces.assert_spans(spans.get_finished_spans(), events)


def test_without_an_exporter_a_run_still_logs_its_causes_and_makes_no_span(store: Any) -> None:
    assert telemetry.active() is None
    xid = _run(store)
    traces.assert_chain(store.load(xid))


CHILD = (
    "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: child, path: tests/traced_child}\n"
    "workflow:\n  - step: work\n    tool: {kind: noop}\n"
)
PARENT = (
    HEADER
    + """\
workflow:
  - step: call
    tool: {kind: playbook, path: tests/traced_child}
"""
)


def test_a_child_run_s_spans_are_part_of_its_parent_s_trace(
    store: Any, spans: InMemorySpanExporter
) -> None:
    """The child's run span is a child of the parent's attempt that started it; its
    attempts are in the same trace: one tree from the parent's run down."""

    async def main() -> int:
        async with EmbeddedEngine(store, machine_id=3) as engine:
            engine.service.register(CHILD, load.load_text(CHILD))
            state = await engine.run(load.load_text(PARENT), PARENT, timeout=60)
        assert state.status == "COMPLETED", state.error
        return state.execution_id

    xid = asyncio.run(main())
    [call] = [e for e in store.load(xid) if e.event_type == "command.issued"]
    [child_row] = [r for r in store.list_executions() if r.parent_execution_id == xid]
    child = child_row.execution_id
    [started] = [e for e in store.load(child) if e.event_type == "execution.started"]
    assert started.payload["traceparent"] == tc.attempt_traceparent(xid, call.event_id)
    finished = spans.get_finished_spans()
    trace = tc.trace_id(xid)
    assert {s.context.trace_id for s in finished if s.context} == {trace}, "one trace"
    by_name = {s.name: s for s in finished}
    child_run = by_name["run tests/traced_child"]
    assert child_run.parent is not None and child_run.parent.span_id == tc.attempt_span_id(
        call.event_id
    )
    assert child_run.context is not None and child_run.context.span_id == tc.run_span_id(child)
    work = by_name["step work"]
    assert work.parent is not None and work.parent.span_id == tc.run_span_id(child)
    assert by_name["step call"].parent is not None
    assert by_name["step call"].parent.span_id == tc.run_span_id(xid)
