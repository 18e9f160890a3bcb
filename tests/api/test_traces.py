"""Causality and spans through the server: the traceparent a command carries, a real
worker's attempt spans parented by it across the HTTP hop, the parent chain on both
stores."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from milepost.client import AsyncMilepostClient, MilepostClient
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
    db_url: str, spans: InMemorySpanExporter
) -> None:
    with live_server(db_url) as server:
        worker = Settings(
            server_url=server.url,
            token=server.tokens["worker"],
            nats_url=None,
            concurrency=2,
            python_workers=1,
            worker_id="traced",
            grace_seconds=0.0,
        )

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


def _printed_spans(text: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed (JSON objects, one after another)."""
    decoder, spans, at = json.JSONDecoder(), [], text.find("{")
    while at != -1:
        span, end = decoder.raw_decode(text, at)
        spans.append(span)
        at = text.find("{", end)
    return spans


def test_a_worker_process_configured_by_the_standard_variable_exports_spans_under_the_servers_traceparent(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:  # noqa: E501
    with live_server(f"sqlite:///{tmp_path / 'traced.db'}") as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MILEPOST_", "OTEL_"))}
        env.update(
            MILEPOST_TOKEN=server.tokens["worker"],
            OTEL_TRACES_EXPORTER="console",
            MILEPOST_PYTHON_WORKERS="1",
            MILEPOST_GRACE_SECONDS="5",
        )
        worker = subprocess.Popen(
            [sys.executable, "-m", "milepost.cli", "worker", "--server", server.url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            with MilepostClient(server.url, server.tokens["admin"]) as client:
                xid = client.execute(client.register(CHAIN)["path"])
                assert client.wait(xid, timeout=60)["status"] == "COMPLETED"
        finally:
            worker.send_signal(signal.SIGTERM)
            out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
    printed = [s for s in _printed_spans(out) if s["name"].startswith("step ")]
    assert len(printed) == 4, out
    run = f"0x{tc.run_span_id(int(xid)):016x}"
    assert {s["parent_id"] for s in printed} == {run}
    assert {s["context"]["trace_id"] for s in printed} == {f"0x{tc.trace_id(int(xid)):032x}"}
    assert all(s["resource"]["attributes"]["service.name"] == "milepost-worker" for s in printed)
    # the server's own span of the run, in this process: the worker's spans hang under it
    [run_span] = [s for s in spans.get_finished_spans() if s.name.startswith("run ")]
    assert run_span.context is not None and f"0x{run_span.context.span_id:016x}" == run
