"""What schemathesis found (test_openapi_fuzz.py), pinned one by one: input that reached the
database and answered 500 now gets a 422 that names the field, on both databases."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.support import Api, error, ok, report_wire

NUL = "a\x00b"

NUL_BODIES = [
    ("/api/catalog/resource", {"path": NUL}, ["body", "path"]),
    ("/api/catalog/resource", {"catalog_id": f"{NUL}@1"}, ["body", "catalog_id"]),
    ("/api/execute", {"path": NUL}, ["body", "path"]),
    ("/api/commands/claim", {"worker_id": NUL}, ["body", "worker_id"]),
    ("/api/commands/claim", {"worker_id": "w1", "pool": NUL}, ["body", "pool"]),
    ("/api/commands/1/claim", {"worker_id": NUL}, ["body", "worker_id"]),
    ("/api/commands/1/heartbeat", {"worker_id": NUL, "epoch": 1}, ["body", "worker_id"]),
    ("/api/commands/1/release", {"worker_id": NUL, "epoch": 1}, ["body", "worker_id"]),
    (
        "/api/events",
        {"execution_id": "1", "event_type": "command.heartbeat", "step": NUL},
        ["body", "step"],
    ),
    ("/api/events", {"execution_id": "1", "event_type": NUL}, ["body", "event_type"]),
    (
        "/api/events/batch",
        {"events": [{"execution_id": "1", "event_type": "command.heartbeat", "worker_id": NUL}]},
        ["body", "events", 0, "worker_id"],
    ),
    ("/api/credentials", {"name": NUL, "type": "http", "data": {}}, ["body", "name"]),
    ("/api/credentials", {"name": "c", "type": NUL, "data": {}}, ["body", "type"]),
]


@pytest.mark.parametrize(
    ("path", "body", "loc"),
    NUL_BODIES,
    ids=[f"{p}:{'.'.join(map(str, loc[1:]))}" for p, _, loc in NUL_BODIES],
)
def test_a_nul_in_a_string_the_database_stores_is_a_422_naming_the_field(
    api: Api, path: str, body: dict[str, Any], loc: list[Any]
) -> None:
    """PostgreSQL text cannot hold NUL: it was a 500 from the driver (with the database URL)."""
    reply = error(api.post(path, body), 422, "validation_error")
    assert reply["errors"][0]["loc"] == loc, reply
    assert api.store.list_executions() == [] and api.store.list_credentials() == []


@pytest.mark.parametrize(
    ("path", "params", "loc"),
    [
        ("/api/executions", {"path": NUL}, ["query", "path"]),
        ("/api/executions", {"status": NUL}, ["query", "status"]),
    ],
)
def test_a_nul_in_a_query_is_a_422(
    api: Api, path: str, params: dict[str, str], loc: list[str]
) -> None:
    reply = error(api.get(path, params=params), 422, "validation_error")
    assert reply["errors"][0]["loc"] == loc


def test_a_nul_in_a_credential_name_in_the_path_is_a_422(api: Api) -> None:
    for method in ("GET", "DELETE"):
        reply = error(api.call(method, "/api/credentials/a%00b"), 422, "validation_error")
        assert reply["errors"][0]["loc"] == ["path"]  # the edge refuses it before routing


BIG = 1 << 63  # one past BIGINT: SQLite raised OverflowError, PostgreSQL "out of range"


@pytest.mark.parametrize(
    ("params", "loc"),
    [
        ({"offset": BIG}, ["query", "offset"]),
    ],
)
def test_a_list_offset_past_64_bits_is_a_422(
    api: Api, params: dict[str, int], loc: list[str]
) -> None:
    reply = error(api.get("/api/executions", params=params), 422, "validation_error")
    assert reply["errors"][0]["loc"] == loc
    ok(api.get("/api/executions", params={"offset": BIG - 1}))


def test_integers_past_64_bits_in_bodies_and_reads_are_a_422(api: Api) -> None:
    xid = api.execute()
    command = api.claim_one()
    cid = command["command_id"]
    reply = error(
        api.get(f"/api/executions/{xid}", params={"events_after": BIG}), 422, "validation_error"
    )
    assert reply["errors"][0]["loc"] == ["query", "events_after"]
    reply = error(
        api.post("/api/catalog/resource", {"path": "tests/hello", "version": BIG}),
        422,
        "validation_error",
    )
    assert reply["errors"][0]["loc"] == ["body", "version"]
    for action in ("heartbeat", "release"):
        reply = error(
            api.post(
                f"/api/commands/{cid}/{action}", {"worker_id": "w1", "epoch": BIG}, role="worker"
            ),
            422,
            "validation_error",
        )
        assert reply["errors"][0]["loc"] == ["body", "epoch"]
    assert ok(
        api.post(
            f"/api/commands/{cid}/heartbeat",
            {"worker_id": "w1", "epoch": command["lease"]["epoch"]},
            role="worker",
        )
    )


def test_a_time_no_iso_text_can_hold_is_refused_and_the_run_stays_readable(api: Api) -> None:
    """`created_at: 1e20` was stored, and every read of the run answered 500 afterwards."""
    xid = api.execute()
    command = api.claim_one()
    events = report_wire(command, "x")
    events[0]["created_at"] = 1e20
    reply = error(
        api.post("/api/events/batch", {"events": events}, role="worker"), 422, "validation_error"
    )
    assert reply["errors"][0]["loc"] == ["body", "events", 0, "created_at"]
    ok(api.get(f"/api/executions/{xid}"))
    events[0]["created_at"] = "2199-12-31T23:59:59+00:00"  # the last second of the range
    assert ok(api.post("/api/events/batch", {"events": events}, role="worker"))["stored"] == 1
    times = [
        e["created_at"]
        for e in ok(api.get(f"/api/executions/{xid}"))["events"]
        if e["event_id"] == events[0]["event_id"]
    ]
    assert times == ["2199-12-31T23:59:59.000+00:00"]


@pytest.mark.parametrize("text", ["\u0661\u0662", " 12", "12 "])
def test_an_id_is_ascii_digits_as_the_document_says(api: Api, text: str) -> None:
    """`int()` read these as 12: the document (`^[0-9]+$`) and the server disagreed."""
    xid = api.execute()
    for reply in (
        api.get(f"/api/executions/{text}"),
        api.post("/api/events", {"execution_id": text, "event_type": "x"}, role="worker"),
        api.post("/api/execute", {"path": "tests/hello", "parent_execution_id": text}),
    ):
        error(reply, 422, "validation_error")
    assert ok(api.get(f"/api/executions/{xid}"))["execution_id"] == xid


@pytest.mark.parametrize(
    ("path", "body", "loc"),
    [
        ("/api/workers/machine-id", {"worker_id": "w", "machine_id": False}, "machine_id"),
        ("/api/commands/claim", {"worker_id": "w", "limit": True}, "limit"),
        ("/api/catalog/resource", {"path": "tests/hello", "version": True}, "version"),
    ],
)
def test_a_boolean_where_a_number_is_meant_is_a_422(
    api: Api, path: str, body: dict[str, Any], loc: str
) -> None:
    """Schemathesis (100 examples) sent `{"machine_id": false}`: read as machine id 0."""
    reply = error(api.post(path, body, role="admin"), 422, "validation_error")
    assert reply["errors"][0]["loc"] == ["body", loc], reply
    assert "boolean" in reply["errors"][0]["msg"]
