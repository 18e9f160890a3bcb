"""W3C trace context of runs and attempts, and the exporter settings."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from milepost import telemetry
from milepost.core import tracecontext as tc
from milepost.core.work import AttemptResult, report_events, work_item
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.orchestrator import Orchestrator
from milepost.engine.tracing import RunSpans
from milepost.playbook import load
from milepost.settings import Settings
from milepost.store.memory import MemoryStore
from tests import traces
from tests.receiver import serve


def test_a_runs_trace_id_is_stable_and_differs_between_runs() -> None:
    assert tc.trace_id(402601968591175680) == tc.trace_id(402601968591175680)
    assert tc.trace_id(402601968591175680) != tc.trace_id(402601968591175681)
    assert tc.run_span_id(7) != tc.attempt_span_id(7)
    assert 0 < tc.trace_id(0) < 2**128 and 0 < tc.run_span_id(0) < 2**64


def test_a_commands_traceparent_is_w3c_shaped_and_names_the_run_span() -> None:
    value = tc.command_traceparent(42)
    version, trace, span, flags = value.split("-")
    assert (version, flags, len(trace), len(span)) == ("00", "01", 32, 16)
    assert tc.parse(value) == (tc.trace_id(42), tc.run_span_id(42))
    assert tc.parse(tc.attempt_traceparent(42, 99)) == (tc.trace_id(42), 99)


@pytest.mark.parametrize(
    "value",
    [
        None,
        7,
        "",
        "00-abc-def-01",
        "ff-" + "1" * 32 + "-" + "1" * 16 + "-01",
        "00-" + "0" * 32 + "-" + "1" * 16 + "-01",
        "00-" + "1" * 32 + "-" + "0" * 16 + "-01",
        "00-" + "g" * 32 + "-" + "1" * 16 + "-01",
    ],
)
def test_an_invalid_traceparent_is_ignored_not_an_error(value: object) -> None:
    assert tc.parse(value) is None
    # an attempt of a command carrying it is in its run's own trace
    assert tc.parse(tc.attempt_traceparent(42, 99, value)) == (tc.trace_id(42), 99)


def test_an_attempt_of_a_child_run_is_in_its_parents_trace_whatever_was_asked_before() -> None:
    parent = tc.format_traceparent(0xABC, 0x123)
    for _ in range(2):  # the second time from the cache of each run's trace
        assert tc.parse(tc.attempt_traceparent(42, 99, parent)) == (0xABC, 99)
        assert tc.parse(tc.attempt_traceparent(42, 99)) == (tc.trace_id(42), 99)
        assert tc.parse(tc.attempt_traceparent(42, 99, {"not": "text"})) == (tc.trace_id(42), 99)


@pytest.fixture
def no_exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    telemetry.reset()
    yield
    telemetry.reset()


def test_no_exporter_configured_means_no_telemetry_and_no_run_listener(no_exporter: None) -> None:
    assert telemetry.from_settings(Settings(otel_exporter=None)) is None
    assert telemetry.from_settings(Settings(otel_exporter="none")) is None
    store = MemoryStore()
    engine = Lifecycle(store, Orchestrator(store))
    assert not any(isinstance(listener, RunSpans) for listener in engine.listeners)


def test_a_configured_exporter_puts_the_run_listener_on_the_engine(no_exporter: None) -> None:
    for _ in traces.exporting():
        store = MemoryStore()
        engine = Lifecycle(store, Orchestrator(store))
        assert any(isinstance(listener, RunSpans) for listener in engine.listeners)


def test_the_standard_variable_configures_the_console_exporter(
    no_exporter: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    configured = telemetry.from_settings(Settings())
    assert configured is not None and telemetry.active() is configured


def test_an_unknown_exporter_is_refused_naming_the_setting_and_the_choices(
    no_exporter: None,
) -> None:
    with pytest.raises(telemetry.TelemetryMisconfigured) as caught:
        telemetry.from_settings(Settings(otel_exporter="zipkin"))
    assert caught.value.code == "telemetry_misconfigured"
    assert caught.value.fields == {
        "setting": "otel_exporter",
        "value": "zipkin",
        "allowed": ["none", "console", "otlp"],
    }
    assert "'zipkin'" in caught.value.message and telemetry.active() is None


def test_otlp_without_its_exporter_installed_says_what_to_install(
    no_exporter: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the OTLP exporter is an extra (`milepost[otlp]`): as if it were not installed
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(telemetry.TelemetryMisconfigured, match=r"milepost\[otlp\]"):
        telemetry.from_settings(Settings(otel_exporter="otlp"))


def test_otlp_exports_the_run_and_attempt_spans_to_the_collector_s_http_endpoint(
    no_exporter: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    with serve() as collector:
        # the standard variables configure the endpoint, as for any OTLP exporter
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.url + "/v1/traces")
        spans = telemetry.from_settings(Settings(otel_exporter="otlp"), service="milepost-test")
        assert spans is not None and telemetry.active() is spans
        store = MemoryStore()
        engine = Lifecycle(store, Orchestrator(store))
        pb = load.load_text(HELLO)
        engine.register(HELLO, pb)
        xid, _ = engine.start(pb, 1, {})
        state = engine.orchestrator.state(xid)
        [command] = state.commands.values()
        _, lease = engine.claim(command.command_id, "w1", 30.0)
        item = work_item(state, pb, command, lease.epoch)
        with spans.attempt(item) as span:
            spans.attempt_outcome(span, AttemptResult(ok=True))
        engine.report(
            report_events(
                item, AttemptResult(ok=True, result=1), engine.new_id(), engine.clock(), "w1"
            )
        )
        assert engine.orchestrator.state(xid).status == "COMPLETED"
        telemetry.reset()  # flushes the batch
        assert collector.received, "nothing exported"
    assert {r.path for r in collector.received} == {"/v1/traces"}
    assert {r.headers["content-type"] for r in collector.received} == {"application/x-protobuf"}
    exported = []
    for request in collector.received:
        message = ExportTraceServiceRequest()
        message.ParseFromString(request.body)
        for resource in message.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            assert service["service.name"] == "milepost-test"
            exported += [s for scope in resource.scope_spans for s in scope.spans]
    by_name = {s.name: s for s in exported}
    assert set(by_name) == {"run tests/otlp", "step start"}
    run, attempt = by_name["run tests/otlp"], by_name["step start"]
    assert int.from_bytes(run.trace_id, "big") == tc.trace_id(xid)
    assert int.from_bytes(run.span_id, "big") == tc.run_span_id(xid)
    assert attempt.trace_id == run.trace_id and attempt.parent_span_id == run.span_id
    assert int.from_bytes(attempt.span_id, "big") == tc.attempt_span_id(command.command_id)


HELLO = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: otlp, path: tests/otlp}
workflow:
  - step: start
    tool: {kind: noop}
"""
