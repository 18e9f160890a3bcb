"""OpenTelemetry spans of runs and attempts, when an exporter is configured.

One span per step attempt, started where the attempt runs (a worker, or the embedded
engine's in-process workers) as the child of its command's `traceparent`, and one per
run, emitted by the engine when the run ends with its start read from the log. Their
ids come from `core.tracecontext`: the run span's id is known before the run span
exists, so the attempts started earlier (on another machine, across the HTTP hop) name
it as their parent, and the tree holds together.

Configured once per process (`configure`, or `from_settings` for `MILEPOST_OTEL_EXPORTER`
/ `OTEL_TRACES_EXPORTER`), with a provider of its own: milepost's spans never turn on
another library's tracing (FastAPI's, say) that merely looks for a global provider.
Nothing configured: `active()` is None, and the callers do nothing else.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from milepost.core import state as st
from milepost.core import tracecontext as tc
from milepost.core.work import AttemptResult, WorkItem
from milepost.errors import MilepostError
from milepost.settings import Settings

EXPORTERS = ("none", "console", "otlp")
"""What `MILEPOST_OTEL_EXPORTER` (else `OTEL_TRACES_EXPORTER`) may name."""


class TelemetryMisconfigured(MilepostError):
    """The OpenTelemetry exporter setting names nothing milepost can export to."""

    code = "telemetry_misconfigured"


class _ChosenIds(IdGenerator):
    """Random ids, except the one span (and trace) a caller chose for the span it starts
    now: the run's and the attempt's ids are derived, not drawn."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._chosen: contextvars.ContextVar[tuple[int | None, int | None]] = (
            contextvars.ContextVar("milepost_chosen_ids", default=(None, None))
        )

    def generate_span_id(self) -> int:
        span = self._chosen.get()[1]
        return span if span is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        trace_id = self._chosen.get()[0]
        return trace_id if trace_id is not None else self._random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return False  # a hash of the execution id: stable, not the W3C random kind

    @contextlib.contextmanager
    def chosen(self, trace_id: int | None, span_id: int) -> Iterator[None]:
        token = self._chosen.set((trace_id, span_id))
        try:
            yield
        finally:
            self._chosen.reset(token)


class Telemetry:
    """The spans of one process: its provider, exporter and the two kinds of span."""

    def __init__(
        self, exporter: SpanExporter, *, batch: bool = True, service: str = "milepost"
    ) -> None:
        self._ids = _ChosenIds()
        self.provider = TracerProvider(
            id_generator=self._ids, resource=Resource.create({"service.name": service})
        )
        # batched for a real exporter: an attempt never waits for the collector
        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("milepost")

    @contextlib.contextmanager
    def attempt(self, item: WorkItem) -> Iterator[trace.Span]:
        """The span of one attempt, child of its command's traceparent, ended on exit."""
        context = _remote_parent(item.traceparent)
        attributes: dict[str, Any] = {
            "milepost.execution_id": str(item.execution_id),
            "milepost.command_id": str(item.command_id),
            "milepost.step": item.step,
            "milepost.run": item.run,
            "milepost.attempt": item.attempt,
        }
        if item.index != st.NO_INDEX:
            attributes["milepost.index"] = item.index
        with self._ids.chosen(None, tc.attempt_span_id(item.command_id)):
            span = self.tracer.start_span(
                f"step {item.step}", context=context, attributes=attributes
            )
        try:
            yield span
        finally:
            span.end()

    @staticmethod
    def attempt_outcome(span: trace.Span, outcome: AttemptResult) -> None:
        if outcome.ok:
            return
        error = outcome.error or {}
        span.set_attribute("milepost.error.kind", str(error.get("kind") or "error"))
        span.set_status(Status(StatusCode.ERROR, str(error.get("message") or "failed")))

    def run(self, state: st.ExecutionState) -> None:
        """The span of an ended run: from `execution.started` to its terminal event."""
        xid = state.execution_id
        # a child run's span is a child of the parent's attempt that began it, in the
        # parent's trace (`traceparent`); a root's has no parent
        context = _remote_parent(state.traceparent) or otel_context.Context()
        links = []
        if (
            state.traceparent is None
            and state.parent_execution_id is not None
            and state.parent_command_id is not None
        ):
            # a child started before children joined their parent's trace: its own trace,
            # linked to that attempt
            parent = SpanContext(
                tc.trace_id(state.parent_execution_id),
                tc.attempt_span_id(state.parent_command_id),
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
            links.append(Link(parent))
        attributes = {
            "milepost.execution_id": str(xid),
            "milepost.playbook": state.path,
            "milepost.status": state.status,
        }
        with self._ids.chosen(tc.run_trace(xid, state.traceparent), tc.run_span_id(xid)):
            span = self.tracer.start_span(
                f"run {state.path}",
                context=context,
                links=links,
                attributes=attributes,
                start_time=_ns(state.started_at),
            )
        if state.status == st.FAILED:
            reason = (state.error or {}).get("reason") or (state.error or {}).get("message")
            span.set_status(Status(StatusCode.ERROR, str(reason or "failed")))
        span.end(end_time=_ns(state.ended_at if state.ended_at is not None else state.started_at))

    def shutdown(self) -> None:
        self.provider.shutdown()  # flushes what a batch still holds


def _remote_parent(traceparent: object) -> otel_context.Context | None:
    """The context whose current span is the (remote) parent a `traceparent` names."""
    parent = tc.parse(traceparent)
    if parent is None:
        return None
    remote = SpanContext(
        parent[0], parent[1], is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    return trace.set_span_in_context(NonRecordingSpan(remote))


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


_active: Telemetry | None = None


def active() -> Telemetry | None:
    """This process's telemetry, None when no exporter is configured."""
    return _active


def configure(
    exporter: SpanExporter, *, batch: bool = True, service: str = "milepost"
) -> Telemetry:
    """Export this process's spans to `exporter` (replacing what was configured)."""
    global _active
    reset()
    _active = Telemetry(exporter, batch=batch, service=service)
    return _active


def reset() -> None:
    """No spans any more (the previous exporter is flushed and shut down)."""
    global _active
    previous, _active = _active, None
    if previous is not None:
        previous.shutdown()


def from_settings(settings: Settings, *, service: str = "milepost") -> Telemetry | None:
    """Configure from `settings.otel_exporter`, else the standard `OTEL_TRACES_EXPORTER`;
    neither set (or `none`): whatever code configured stays (None by default)."""
    name = (settings.otel_exporter or os.environ.get("OTEL_TRACES_EXPORTER") or "").strip()
    name = name.lower()
    if name in ("", "none"):
        return _active
    if name == "console":
        return configure(ConsoleSpanExporter(service_name=service), service=service)
    if name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
                OTLPSpanExporter,
            )
        except ImportError:
            raise TelemetryMisconfigured(
                "otel_exporter 'otlp' needs the OTLP exporter: pip install "
                "'milepost[otlp]' (opentelemetry-exporter-otlp-proto-http)",
                setting="otel_exporter",
                value=name,
            ) from None
        # the endpoint, headers and timeout come from the standard OTEL_EXPORTER_OTLP_* vars
        return configure(OTLPSpanExporter(), service=service)
    raise TelemetryMisconfigured(
        f"otel_exporter {name!r} is not one of {', '.join(EXPORTERS)}",
        setting="otel_exporter",
        value=name,
        allowed=list(EXPORTERS),
    )
