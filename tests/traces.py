"""Helpers of the causality and trace tests: a run's parent chain, spans in memory."""

from __future__ import annotations

from collections.abc import Iterator

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from milepost import telemetry
from milepost.core import events as ev
from milepost.core import tracecontext as tc

CHAIN = """
workflow:
  - step: start
    tool: {kind: noop}
    next: each
  - step: each
    loop: {in: "{{ [1, 2] }}", iterator: n, spec: {mode: parallel, max_in_flight: 2}}
    tool: {kind: noop}
    next: end
  - step: end
    tool: {kind: noop}
"""
"""Three steps, the middle one a loop of two: four attempts."""


def exporting() -> Iterator[InMemorySpanExporter]:
    """This process's spans into memory (exported as each ends) for one test."""
    exporter = InMemorySpanExporter()
    telemetry.configure(exporter, batch=False)
    try:
        yield exporter
    finally:
        telemetry.reset()


def one(
    events: list[ev.Event], event_type: str, step: str | None = None, index: int | None = None
) -> ev.Event:
    found = [
        e
        for e in events
        if e.event_type == event_type
        and e.step == step
        and (index is None or e.payload.get("index") == index)
    ]
    assert len(found) == 1, (event_type, step, index, found)
    return found[0]


def assert_chain(events: list[ev.Event]) -> None:
    """The parent of each event of a run of `CHAIN`, as the log holds it."""
    by_id = {e.event_id: e for e in events}
    started = one(events, ev.EXECUTION_STARTED)
    assert started.parent_event_id is None
    for e in events:
        if e is not started:
            assert e.parent_event_id in by_id, f"{e.event_type} {e.step}: no parent in the log"

    def parent(e: ev.Event) -> ev.Event:
        return by_id[e.parent_event_id or 0]

    cause = started
    for step, indexes in (("start", [-1]), ("each", [0, 1]), ("end", [-1])):
        enter = one(events, ev.STEP_ENTER, step)
        assert parent(enter) == cause, (step, parent(enter), cause)
        reports = []
        for index in indexes:
            issued = one(events, ev.COMMAND_ISSUED, step, index)
            assert parent(issued) == enter
            for kind in (ev.COMMAND_CLAIMED, ev.COMMAND_COMPLETED):
                assert parent(one(events, kind, step, index)) == issued, (kind, step, index)
            completed = one(events, ev.COMMAND_COMPLETED, step, index)
            # the report carries back the attempt's own span, a child of the run's
            assert completed.meta["traceparent"] == tc.attempt_traceparent(
                started.execution_id, issued.event_id
            )
            reports.append(completed)
        exit_ = one(events, ev.STEP_EXIT, step)
        last = max(reports, key=lambda e: e.seq)
        if step == "each":
            assert parent(one(events, ev.LOOP_DONE, step)) == last
            assert parent(exit_) == one(events, ev.LOOP_DONE, step)
        else:
            assert parent(exit_) == last
        cause = exit_
    assert parent(one(events, ev.EXECUTION_COMPLETED)) == cause


def assert_spans(spans: tuple[ReadableSpan, ...], events: list[ev.Event]) -> None:
    """One run span from the start to the end of the log, one span per attempt, each a
    child of the run span, with the span id of its command."""
    started = one(events, ev.EXECUTION_STARTED)
    xid = started.execution_id
    runs = [s for s in spans if s.name.startswith("run ")]
    assert len(runs) == 1, [s.name for s in spans]
    run = runs[0]
    assert run.context is not None
    assert (run.context.trace_id, run.context.span_id) == (tc.trace_id(xid), tc.run_span_id(xid))
    assert run.parent is None
    assert run.start_time == int(started.created_at * 1e9)
    assert run.end_time == int(one(events, ev.EXECUTION_COMPLETED).created_at * 1e9)
    assert run.attributes is not None and run.attributes["milepost.status"] == "COMPLETED"
    attempts = sorted(
        (s for s in spans if s.name.startswith("step ")), key=lambda s: s.start_time or 0
    )
    issued = [e for e in events if e.event_type == ev.COMMAND_ISSUED]
    assert len(attempts) == len(issued) == 4
    assert {s.context.span_id for s in attempts if s.context} == {
        tc.attempt_span_id(e.event_id) for e in issued
    }
    for span in attempts:
        assert span.parent is not None and span.context is not None
        assert (span.parent.trace_id, span.parent.span_id) == (
            tc.trace_id(xid),
            tc.run_span_id(xid),
        )
        assert span.context.trace_id == tc.trace_id(xid)
        assert span.attributes is not None and span.attributes["milepost.execution_id"] == str(xid)
