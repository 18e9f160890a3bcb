"""Causality and spans through the server: the traceparent a command carries, a real
worker's attempt spans parented by it across the HTTP hop, the parent chain on both
stores."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from milepost.client import AsyncMilepostClient
from milepost.core import events as ev
from milepost.core import tracecontext as tc
from milepost.settings import Settings
from milepost.worker.main import run_worker
from tests import traces
from tests.api.support import Api, live_server, playbook, report_wire

CHAIN = playbook("tests/traced", traces.CHAIN)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from traces.exporting()


def test_a_claimed_command_carries_its_runs_traceparent(api: Api) -> None:
    xid = api.execute(CHAIN)
    command = api.claim_one()
    assert command["traceparent"] == tc.command_traceparent(int(xid))
    assert tc.parse(command["traceparent"]) == (tc.trace_id(int(xid)), tc.run_span_id(int(xid)))
    # a report that names no parent (this one does not) is caused by its command
    assert "parent_event_id" not in report_wire(command, {"ok": True})[0]
    api.complete(command, {"ok": True})
    reported = [e for e in api.store.load(int(xid)) if e.event_type == ev.COMMAND_COMPLETED]
    assert [e.parent_event_id for e in reported] == [int(command["command_id"])]


def test_a_worker_over_http_spans_each_attempt_as_a_child_of_the_traceparent_the_server_sent(
        db_url: str, spans: InMemorySpanExporter) -> None:  # fmt: skip
    with live_server(db_url) as server:
        worker = Settings(server_url=server.url, token=server.tokens["worker"], nats_url=None,
                          concurrency=2, python_workers=1, worker_id="traced",
                          grace_seconds=0.0)  # fmt: skip

        async def main() -> str:
            working = asyncio.create_task(run_worker(worker))
            try:
                async with AsyncMilepostClient(server.url, server.tokens["admin"]) as client:
                    path = (await client.register(CHAIN))["path"]
                    xid = await client.execute(path)
                    status = await client.wait(xid, timeout=60)
                assert status["status"] == "COMPLETED", status
                return xid
            finally:
                working.cancel()
                await asyncio.gather(working, return_exceptions=True)

        xid = asyncio.run(main())
        events = server.services.store.load(int(xid))
    traces.assert_chain(events)
    traces.assert_spans(spans.get_finished_spans(), events)
