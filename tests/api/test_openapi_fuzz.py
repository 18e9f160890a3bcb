"""Schemathesis against a live server (issue 8, item 13): the OpenAPI document is true.

Every operation of `GET /openapi.json` gets `EXAMPLES` schema-valid requests, as many
schema-invalid ones, and `EXAMPLES` schema-valid ones whose ids and names are those of a
real execution, command, playbook and credential (random ids only ever reach the 404
branch), as admin and again as a worker; then the reads once more, aimed, to see that what
the writes stored reads back. Each response is checked: no 5xx, a documented status, a
documented content type and headers, a body that matches its schema, and a 4xx for input
the document calls invalid. Hypothesis is derandomized: the same requests on every run, so
a failure reproduces. The server runs on SQLite and on a fresh PostgreSQL database
(`db_url`; under `CI=true` an unreachable PostgreSQL fails instead of skipping).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi import checks as openapi_checks

from milepost.api.app import create_app
from tests.api.support import HELLO, LiveServer, live_server, ok, settings_for

EXAMPLES = int(os.environ.get("MILEPOST_FUZZ_EXAMPLES", "30"))
"""Per operation and pass: 106 s on SQLite and 132 s on PostgreSQL under `make test` on a
2-vCPU machine (2026-12-03; the longest test file of the suite). Raise it for a deeper
search (`MILEPOST_FUZZ_EXAMPLES=200`); the requests stay the same for the same value."""

CHECKS = [
    not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_headers_conformance,
    openapi_checks.response_schema_conformance,
    # what the document calls invalid is refused (not `positive_data_acceptance`: a
    # schema-valid body may still name a playbook or execution that does not exist)
    openapi_checks.negative_data_rejection,
]

# the live server runs in this process: psycopg_pool's threads draw from the global
# `random` (the jitter of a connection's lifetime) while Hypothesis draws a case, and
# Hypothesis takes that for the strategy using `random` (a flaky HypothesisDeprecationWarning,
# an error here). Our strategies use no `random`; only that warning is let through.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies"
    ":hypothesis.errors.HypothesisDeprecationWarning"
)

SETTINGS = hypothesis.settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@dataclass
class Tally:
    """What a run did: requests and 5xx per operation, and the distinct failures."""

    requests: Counter[str] = field(default_factory=Counter)
    server_errors: Counter[str] = field(default_factory=Counter)
    failures: dict[tuple[str, str], str] = field(default_factory=dict)

    def summary(self) -> str:
        return (
            f"{sum(self.requests.values())} requests on {len(self.requests)} operations, "
            f"{sum(self.server_errors.values())} 5xx on {len(self.server_errors)} operations, "
            f"{len(self.failures)} distinct failures"
        )


@dataclass(frozen=True)
class Known:
    """Ids and names that exist on the server, for the pass that aims at them."""

    execution_id: str
    command_id: str
    playbook_path: str
    credential: str

    def aim(self, case: Case) -> None:
        """Point `case` at what exists: path parameters and the ids a body names."""
        if case.path.endswith("/stream"):  # a live run's stream holds until the run ends
            return
        params = case.path_parameters or {}
        for name, value in (
            ("execution_id", self.execution_id),
            ("event_id", self.command_id),
            ("name", self.credential),
        ):
            if name in params:
                params[name] = value
        query = case.query or {}
        if isinstance(query.get("wait"), int | float):  # a live run: the poll would hold 60 s
            query["wait"] = min(query["wait"], 0.05)
        self._aim_body(case.body)

    def _aim_body(self, body: Any) -> None:
        if isinstance(body, list):
            for item in body:
                self._aim_body(item)
        if not isinstance(body, dict):
            return
        if "execution_id" in body or "event_type" in body:
            body["execution_id"] = self.execution_id
        if "parent_execution_id" in body:
            body["parent_execution_id"] = self.execution_id
        if "path" in body:
            body["path"] = self.playbook_path
        self._aim_body(body.get("events"))


@pytest.fixture
def live(db_url: str) -> Iterator[LiveServer]:
    with live_server(db_url) as server:
        yield server


def seed(server: LiveServer) -> Known:
    """A playbook, a run of it with one queued command, a credential."""
    headers = server.headers()

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        return ok(requests.post(server.url + path, json=body, headers=headers, timeout=30))

    entry = post("/api/catalog/register", {"content": HELLO})
    xid = post("/api/execute", {"path": entry["path"]})["execution_id"]
    commands = requests.get(f"{server.url}/api/executions/{xid}", headers=headers, timeout=30)
    [issued] = [e for e in ok(commands)["events"] if e["event_type"] == "command.issued"]
    post("/api/credentials", {"name": "fuzz-cred", "type": "http", "data": {"token": "t"}})
    return Known(
        execution_id=xid,
        command_id=issued["event_id"],
        playbook_path=entry["path"],
        credential="fuzz-cred",
    )


def run_operation(operation: Any, mode: GenerationMode, send: Callable[[Case], None]) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @SETTINGS
    def examples(case: Case) -> None:
        send(case)

    try:
        examples()
    except Unsatisfiable:  # no invalid input exists (an operation without parameters)
        assert mode is GenerationMode.NEGATIVE, operation.label


def fuzz(server: LiveServer, known: Known) -> Tally:
    tally = Tally()
    session = requests.Session()
    raw = session.get(
        server.url + "/openapi.json", headers=server.headers("viewer"), timeout=30
    ).json()
    schema = schemathesis.openapi.from_dict(raw)

    def send(label: str, aim: bool, role: str) -> Callable[[Case], None]:
        headers = server.headers(role)
        transport = {"base_url": server.url, "session": session, "headers": headers}

        def call(case: Case) -> None:
            if aim:
                known.aim(case)
            response = case.call(base_url=server.url, session=session, headers=headers, timeout=60)
            tally.requests[label] += 1
            if response.status_code >= 500:
                tally.server_errors[label] += 1
            try:
                case.validate_response(
                    response, checks=CHECKS, headers=headers, transport_kwargs=transport
                )
            except FailureGroup as group:
                for failure in group.exceptions:
                    tally.failures.setdefault((label, failure.title), str(group)[:1500])

        return call

    # the runs list's change stream never ends by itself (it answers while the client
    # stays): its bad input and its messages are tested in tests/api/test_runs_list.py
    operations = [
        op
        for op in (result.ok() for result in schema.get_all_operations())
        if op.path != "/api/executions/stream"
    ]
    # reads last again: what the writes stored must stay readable (a bad time did not)
    reads = [operation for operation in operations if operation.method.upper() == "GET"]
    passes = [
        (operations, GenerationMode.POSITIVE, False, "admin"),
        (operations, GenerationMode.NEGATIVE, False, "admin"),
        (operations, GenerationMode.POSITIVE, True, "admin"),
        # the routes as a worker holds them: its 403s, and what it may do
        (operations, GenerationMode.POSITIVE, True, "worker"),
        (reads, GenerationMode.POSITIVE, True, "admin"),
    ]
    for chosen, mode, aim, role in passes:
        for operation in chosen:
            run_operation(operation, mode, send(operation.label, aim, role))
    return tally


@pytest.mark.slow
def test_schemathesis_finds_no_5xx_and_no_schema_violation(live: LiveServer) -> None:
    tally = fuzz(live, seed(live))
    print(f"\nschemathesis: {tally.summary()}")
    assert len(tally.requests) >= 20, tally.requests  # every route was exercised
    details = "\n\n".join(
        f"== {label}: {title}\n{text}" for (label, title), text in sorted(tally.failures.items())
    )
    assert not tally.failures, f"{tally.summary()}\n\n{details}"


def openapi() -> dict[str, Any]:
    return create_app(settings_for("sqlite:///unused.db")).openapi()  # no lifespan: nothing opened


def test_the_document_describes_the_422_the_app_sends_not_fastapis() -> None:
    document = openapi()
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert {"code", "message"} <= set(schemas["ErrorOut"]["required"])
    assert set(schemas["ValidationErrorOut"]["properties"]) >= {"code", "message", "errors"}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            if path != "/health":
                assert {"401", "403"} <= set(responses), (method, path)
            if operation.get("parameters") or operation.get("requestBody"):
                # the app's body of a refused request (code, message, the fields wrong),
                # ValidationErrorOut or a route's own with more (validate's problem parts)
                ref = responses["422"]["content"]["application/json"]["schema"]["$ref"]
                described = schemas[ref.rsplit("/", 1)[1]]
                assert set(described["properties"]) >= {"code", "message", "errors"}, (method, path)
                assert {"code", "message"} <= set(described["required"]), (method, path)
            if operation.get("requestBody"):
                assert {"400", "413"} <= set(responses), (method, path)


def test_ids_are_digit_strings_out_and_integer_or_digit_string_in() -> None:
    schemas = openapi()["components"]["schemas"]
    assert schemas["ExecuteOut"]["properties"]["execution_id"] == {
        "type": "string",
        "pattern": "^[0-9]+$",
        "title": "Execution Id",
    }
    assert schemas["EventOut"]["properties"]["created_at"]["anyOf"][0] == {
        "type": "string",
        "format": "date-time",
    }
    id_in = schemas["EventIn"]["properties"]["execution_id"]
    assert [branch["type"] for branch in id_in["anyOf"]] == ["integer", "string"]
    assert id_in["anyOf"][1]["pattern"] == "^[0-9]+$"


# -- NoETL-shaped batches (DSL 12.3): what a NoETL worker may send, at random -------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_NAMES = st.sampled_from(
    [
        "command.started",
        "command.completed",
        "call.done",
        "call.error",
        "command.claimed",
        "step.enter",
        "step.exit",
        "playbook.completed",
        "loop.item",
        "step.result.preview",
    ]
) | st.text(max_size=12)
_IDS = st.integers(min_value=-1, max_value=2**64) | st.text("0123456789x", max_size=20)


def _noetl_event(xid: str) -> st.SearchStrategy[dict[str, Any]]:
    fields = {
        "name": _NAMES,
        "node_name": st.sampled_from(["start", "shout", "nope"]),
        "payload": _JSON
        | st.fixed_dictionaries({"command_id": _IDS | st.just(xid), "result": _JSON}),
        "meta": _JSON | st.fixed_dictionaries({"epoch": _IDS}),
        "result_kind": st.sampled_from(["ref", "refs", "data", "blob", None]),
        "result_uri": st.none() | st.text(max_size=30),
        "event_ids": st.none() | st.lists(_IDS, max_size=3),
        "execution_id": st.sampled_from([xid, "999", 0]),
        "worker_id": st.none() | st.text(max_size=10),
        "status": st.none() | st.sampled_from(["COMPLETED", "FAILED", "x"]),
    }
    return st.fixed_dictionaries({}, optional=fields)


@pytest.mark.slow
def test_random_noetl_shaped_batches_never_answer_a_5xx(api: Any) -> None:
    """Each batch and each of its events alone: a 2xx or a 4xx with a JSON body (which
    field), never a 5xx; and the run's log still folds (an unknown type is informative)."""
    xid = api.execute()
    api.claim_one()

    @given(
        events=st.lists(_noetl_event(xid), max_size=4),
        top=st.fixed_dictionaries(
            {},
            optional={
                "execution_id": st.sampled_from([xid, "999"]),
                "worker_id": st.text(max_size=10),
            },
        ),
    )
    @hypothesis.settings(
        max_examples=EXAMPLES * 3,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    def batches(events: list[dict[str, Any]], top: dict[str, Any]) -> None:
        for path, body in [
            ("/api/events/batch", {**top, "events": events}),
            *[("/api/events", event) for event in events],
        ]:
            response = api.post(path, body, role="worker")
            assert response.status_code < 500, (path, body, response.text)
            if response.status_code >= 400:
                assert response.json()["code"], response.text

    batches()
    assert api.status(xid)["status"] in ("RUNNING", "COMPLETED", "FAILED")
