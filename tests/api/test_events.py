"""Event ingest: aliases, ids, statuses, idempotency, envelope, sanitizing, fencing, batches."""

from __future__ import annotations

import time
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.core.work import AttemptResult, report_events
from milepost.engine.orchestrator import Orchestrator
from milepost.ids import SEQUENCE_BITS, Snowflake, machine_of
from tests.api.support import HELLO, Api, error, ok, report_wire, start_server, work_item


def count(api: Api, xid: str) -> int:
    return int(api.store.event_count(int(xid)))


def test_one_event_with_aliases_int_ids_and_a_derived_status(api: Api) -> None:
    xid = api.execute(HELLO)
    reply = ok(
        api.post(
            "/api/events",
            {
                "event_id": 42,
                "execution_id": int(xid),
                "name": "command.started",
                "step": "start",
                "payload": {"note": "hi"},
                "worker_id": "w1",
                "created_at": "2024-05-01T12:00:00Z",
            },
            role="worker",
        )
    )
    assert reply == {
        "accepted": 1,
        "stored": 1,
        "event_ids": ["42"],
        "stale": [],
        "ignored": [],
        "stored_ids": ["42"],
        "duplicates": [],
    }
    stored = api.store.load(int(xid))[-1]
    assert (stored.event_id, stored.event_type, stored.status) == (42, "command.started", "RUNNING")
    assert stored.payload == {"note": "hi"} and stored.worker_id == "w1"
    assert stored.created_at == 1714564800.0
    page = ok(api.get(f"/api/executions/{xid}", params={"events_after": stored.seq - 1}))
    assert page["events"][0]["event_id"] == "42"
    assert page["events"][0]["result"] == {"status": "RUNNING", "context": {"note": "hi"}}
    assert page["events"][0]["created_at"].startswith("2024-05-01T12:00:00")


def test_result_context_explicit_status_epoch_seconds_and_a_server_id(api: Api) -> None:
    xid = api.execute(HELLO)
    reply = ok(
        api.post(
            "/api/events/batch",
            {
                "events": [
                    {
                        "execution_id": xid,
                        "event_type": "command.heartbeat",
                        "status": "running",
                        "result": {"status": "RUNNING", "context": {"n": 1}},
                        "created_at": 1700000000.5,
                        "meta": {"k": "v"},
                        "parent_event_id": "7",
                    }
                ]
            },
            role="worker",
        )
    )
    [eid] = reply["event_ids"]
    stored = api.store.load(int(xid))[-1]
    assert str(stored.event_id) == eid and stored.status == "RUNNING"
    assert stored.created_at == 1700000000.5 and stored.parent_event_id == 7
    assert stored.payload == {"n": 1} and stored.meta == {"k": "v"}


def test_an_event_id_already_stored_is_accepted_and_not_stored_twice(api: Api) -> None:
    xid = api.execute(HELLO)
    event = {"event_id": "9001", "execution_id": xid, "event_type": "call.done", "step": "start"}
    command = api.claim_one()
    event["context"] = {"command_id": command["command_id"]}
    event["meta"] = {"epoch": command["lease"]["epoch"]}
    first = ok(api.post("/api/events", event, role="worker"))
    n = count(api, xid)
    again = ok(api.post("/api/events", event, role="worker"))
    assert first["stored"] == 1 and again == {
        "accepted": 1,
        "stored": 0,
        "event_ids": ["9001"],
        "ignored": [],
        "stale": [],
        "stored_ids": [],
        "duplicates": ["9001"],
    }
    assert count(api, xid) == n
    both = ok(
        api.post(
            "/api/events/batch", {"events": [event, {**event, "event_id": 9002}]}, role="worker"
        )
    )
    assert both["accepted"] == 2 and both["stored"] == 1 and count(api, xid) == n + 1
    assert both["stored_ids"] == ["9002"] and both["duplicates"] == ["9001"]


def test_secrets_under_sensitive_keys_are_masked_before_storing(api: Api) -> None:
    xid = api.execute(HELLO)
    ok(
        api.post(
            "/api/events",
            {
                "execution_id": xid,
                "event_type": "command.started",
                "context": {
                    "db": {"password": "hunter22", "user": "ada"},
                    "rows": [{"api_key": "k-123"}],
                },
                "meta": {"Authorization": "Bearer abc", "attempt": 1},
            },
            role="worker",
        )
    )
    stored = api.store.load(int(xid))[-1]
    assert stored.payload == {
        "db": {"password": "***", "user": "ada"},
        "rows": [{"api_key": "***"}],
    }
    assert stored.meta == {"Authorization": "***", "attempt": 1}


def test_what_looks_like_a_secret_in_a_client_event_is_masked_before_storing(api: Api) -> None:
    xid = api.execute(HELLO)
    key = "AKIA" + "ABCDEFGHIJ234567"
    ok(
        api.post(
            "/api/events",
            {
                "execution_id": xid,
                "event_type": "command.started",
                "context": {
                    "log": f"curl -H 'Authorization: Bearer tok-123456789' with {key}",
                    "lines": ["postgresql://app:hunter22@db/sales", "plain text"],
                },
                "meta": {"note": f"key {key}"},
            },
            role="worker",
        )
    )
    stored = api.store.load(int(xid))[-1]
    assert stored.payload == {
        "log": "curl -H 'Authorization: Bearer ***' with AKIA***",
        "lines": ["postgresql://app:***@db/sales", "plain text"],
    }
    assert stored.meta == {"note": "key AKIA***"}


def test_a_workers_report_keeps_its_keys_and_has_only_secret_looking_strings_masked(
    api: Api,
) -> None:
    xid = api.execute(HELLO)
    # the worker has redacted its declared secrets: a key that sounds sensitive is data
    # here, as in embedded mode (a pagination token reaches the next step)
    result = {
        "greeting": "hi",
        "next_page_token": "abc123xyz",
        "access_token": "tok-42",
        "auth": "Bearer abcdefgh12345",
        "lines": ["plain", "Bearer abcdefgh12345"],
    }
    api.complete(api.claim_one(), result)
    [report] = [e for e in api.store.load(int(xid)) if e.event_type == ev.COMMAND_COMPLETED]
    assert report.payload["result"] == {
        "greeting": "hi",
        "next_page_token": "abc123xyz",
        "access_token": "tok-42",
        "auth": "Bearer ***",
        "lines": ["plain", "Bearer ***"],
    }
    assert api.status(xid)["steps"]["start"]["result"]["next_page_token"] == "abc123xyz"


# a payload that is no object and a type the engine does not know are taken (DSL 12.3,
# tests/api/test_noetl_events.py)
BAD_EVENTS: list[tuple[str, dict[str, Any], list[Any]]] = [
    ("extra key in result", {"result": {"status": "OK", "data": 1}}, ["result", "data"]),
    ("context twice", {"context": {"a": 1}, "result": {"context": {"b": 2}}}, ["context"]),
    ("context and reference", {"result": {"context": {}, "reference": {"uri": "x"}}}, ["result"]),
    (
        "unknown reference",
        {"result": {"reference": {"uri": "milepost://results/99999"}}},
        ["result", "reference", "uri"],
    ),
    ("result not an object", {"result": [1]}, ["result"]),
    ("meta not an object", {"meta": [1]}, ["meta"]),
    ("bad event id", {"event_id": "12ab"}, ["event_id"]),
    ("negative event id", {"event_id": -4}, ["event_id"]),
    ("boolean parent id", {"parent_event_id": True}, ["parent_event_id"]),
    ("bad time", {"created_at": "yesterday"}, ["created_at"]),
    ("step not text", {"step": {"x": 1}}, ["step"]),
    ("engine type", {"event_type": "execution.completed"}, ["event_type"]),
    ("engine type by alias", {"event_type": "playbook.completed"}, ["event_type"]),
    ("no type", {"event_type": None}, ["event_type"]),
    (
        "report without command",
        {"event_type": "command.completed", "meta": {"epoch": 1}},
        ["context", "command_id"],
    ),
    (
        "report without epoch",
        {"event_type": "call.done", "context": {"command_id": "5"}},
        ["meta", "epoch"],
    ),
    (
        "report with a text epoch",
        {"event_type": "command.failed", "meta": {"epoch": "1"}, "context": {"command_id": 5}},
        ["meta", "epoch"],
    ),
]


@pytest.mark.parametrize(("case", "change", "loc"), BAD_EVENTS, ids=[c[0] for c in BAD_EVENTS])
def test_a_malformed_event_is_422_naming_the_field_and_nothing_is_stored(
    api: Api, case: str, change: dict[str, Any], loc: list[Any]
) -> None:
    xid = api.execute(HELLO)
    event = {"execution_id": xid, "event_type": "command.started", **change}
    if event["event_type"] is None:
        del event["event_type"]
    before = count(api, xid)
    single = error(api.post("/api/events", event, role="worker"), 422, "validation_error")
    assert any(e["loc"][1:] == loc for e in single["errors"]), single["errors"]
    assert ".".join(str(p) for p in single["errors"][0]["loc"]) in single["message"]
    batch = error(
        api.post("/api/events/batch", {"events": [event]}, role="worker"), 422, "validation_error"
    )
    assert any(
        e["loc"][3:] == loc and e["loc"][:3] == ["body", "events", 0] for e in batch["errors"]
    ), batch["errors"]
    assert count(api, xid) == before


def test_a_batch_is_all_or_nothing(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    good = report_wire(command, {"greeting": "hi"})[0]
    bad = {"execution_id": xid, "event_type": "command.started", "result": {"oops": 1}}
    before = count(api, xid)
    body = error(
        api.post("/api/events/batch", {"events": [good, bad]}, role="worker"),
        422,
        "validation_error",
    )
    assert body["errors"][0]["loc"] == ["body", "events", 1, "result", "oops"]
    assert count(api, xid) == before and api.status(xid)["steps"]["start"]["status"] == "RUNNING"
    other = {"execution_id": "999", "event_type": "command.started"}
    error(
        api.post("/api/events/batch", {"events": [good, other]}, role="worker"),
        404,
        "execution_not_found",
    )
    assert count(api, xid) == before
    # an empty batch is NoETL's flush of nothing (DSL 12.3): taken, nothing stored
    assert ok(api.post("/api/events/batch", {"events": []}, role="worker"))["stored"] == 0
    error(
        api.post("/api/events/batch", {"events": [good, 5]}, role="worker"), 422, "validation_error"
    )
    assert count(api, xid) == before
    ok(api.post("/api/events/batch", {"events": [good]}, role="worker"))
    assert api.status(xid)["steps"]["start"]["status"] == "COMPLETED"


def test_unknown_execution_and_unknown_command_are_404(api: Api) -> None:
    body = error(
        api.post(
            "/api/events", {"execution_id": "12345", "event_type": "command.started"}, role="worker"
        ),
        404,
        "execution_not_found",
    )
    assert body["execution_id"] == "12345"
    xid = api.execute(HELLO)
    before = count(api, xid)
    body = error(
        api.post(
            "/api/events",
            {
                "execution_id": xid,
                "event_type": "command.completed",
                "context": {"command_id": 777, "epoch": 1},
            },
            role="worker",
        ),
        404,
        "command_not_found",
    )
    assert body["command_id"] == "777" and count(api, xid) == before


def test_a_report_for_a_command_of_another_execution_is_422(api: Api) -> None:
    first = api.execute(HELLO)
    command = api.claim_one()
    second = api.execute(HELLO)
    [report] = report_wire(command, {"greeting": "x"})
    report["execution_id"] = second
    error(api.post("/api/events", report, role="worker"), 422, "validation_error")
    assert api.status(first)["steps"]["start"]["status"] == "RUNNING"


def test_a_stale_epoch_report_is_stored_marked_stale_and_changes_nothing(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    epoch = command["lease"]["epoch"]
    stale = ok(
        api.post(
            "/api/events/batch",
            {"events": report_wire(command, {"greeting": "old"}, epoch=epoch - 1)},
            role="worker",
        )
    )
    assert stale["stored"] == 1 and stale["stale"] == stale["event_ids"]
    stored = api.store.load(int(xid))[-1]
    assert stored.meta["stale"] is True and "epoch" in stored.meta["stale_reason"]
    state = api.status(xid)
    assert state["steps"]["start"]["status"] == "RUNNING" and "shout" not in state["steps"]
    live = api.complete(command, {"greeting": "new"})
    assert live["stale"] == []
    assert api.status(xid)["steps"]["start"]["result"] == {"greeting": "new"}
    # a second report for the settled command is stale too: the first one won
    again = api.complete(command, {"greeting": "twice"})
    assert again["stale"] == again["event_ids"]
    assert api.status(xid)["steps"]["start"]["result"] == {"greeting": "new"}


def test_a_stale_report_leaves_the_command_row_alone(api: Api) -> None:
    api.execute(HELLO)
    command = api.claim_one()
    stale = report_wire(command, {"greeting": "old"}, epoch=command["lease"]["epoch"] + 1)
    assert ok(api.post("/api/events/batch", {"events": stale}, role="worker"))["stale"]
    row = api.store.get_command(int(command["command_id"]))
    assert (row.status, row.worker_id) == ("claimed", "w1")


def test_of_two_reports_for_one_command_in_a_batch_the_second_is_stale(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    first = report_wire(command, {"greeting": "one"})
    second = report_wire(command, {"greeting": "two"})
    reply = ok(api.post("/api/events/batch", {"events": first + second}, role="worker"))
    assert reply["stored"] == 2 and reply["stale"] == [second[0]["event_id"]]
    assert api.status(xid)["steps"]["start"]["result"] == {"greeting": "one"}


def test_a_report_of_a_claim_handed_out_here_needs_no_read_before_its_append(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    reads: list[object] = []
    store = api.store
    original = store.get_commands
    monkeypatch.setattr(store, "get_commands", lambda ids: reads.append(ids) or original(ids))
    reply = api.complete(command, {"greeting": "hi"})
    assert reply["stale"] == [] and reads == []  # the append checked the claim itself
    assert api.status(xid)["steps"]["start"]["result"] == {"greeting": "hi"}
    # a report this server did not hand out (or no longer remembers) is fenced by a read
    again = api.complete(command, {"greeting": "twice"})
    assert again["stale"] == again["event_ids"] and len(reads) == 1


def test_a_claim_that_moved_behind_the_servers_back_makes_the_report_stale(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one("w1")
    cid = int(command["command_id"])
    # another server gives the command back and hands it to w2: this one still remembers
    # w1's claim, so w1's report goes to the append, which finds the claim moved
    assert api.store.release(
        cid, "w1", command["lease"]["epoch"], time.time(), new_id=api.services.engine.new_id
    )
    lease = api.store.claim(cid, "w2", time.time(), 60.0, new_id=api.services.engine.new_id)
    late = api.complete(command, {"greeting": "late"})
    assert late["stored"] == 1 and late["stale"] == late["event_ids"]
    row = api.store.get_command(cid)
    assert (row.status, row.worker_id, row.epoch) == ("claimed", "w2", lease.epoch)
    assert api.status(xid)["steps"]["start"]["status"] == "RUNNING"
    live = api.complete(command, {"greeting": "w2"}, epoch=lease.epoch)
    assert live["stale"] == []
    assert api.status(xid)["steps"]["start"]["result"] == {"greeting": "w2"}


# -- after the end: a run's log ends with its terminal event ----------------------------------


def ended(api: Api, how: str) -> tuple[str, dict[str, Any]]:
    """A run of HELLO ended `how`, and the claimed command whose report is late."""
    xid = api.execute(HELLO)
    command = api.claim_one()
    if how == "COMPLETED":
        api.complete(command, {"greeting": "hi"})
        api.complete(api.claim_one(), {"loud": "HI"})
    elif how == "FAILED":
        api.complete(command, ok_=False)
    else:
        ok(api.post(f"/api/executions/{xid}/cancel"))
        api.complete(command, {"greeting": "hi"})
    assert api.status(xid)["status"] == how
    assert api.event_types(xid)[-1] == f"execution.{how.lower()}"
    return xid, command


@pytest.mark.parametrize("how", ["COMPLETED", "FAILED", "CANCELLED"])
def test_a_late_report_after_the_end_is_accepted_and_not_stored(api: Api, how: str) -> None:
    xid, command = ended(api, how)
    log = api.store.load(int(xid))
    [late] = report_wire(command, {"greeting": "late"})
    for reply in (
        ok(api.post("/api/events", late, role="worker")),
        api.complete(command, {"greeting": "later"}),
    ):
        assert reply["accepted"] == 1 and reply["stored"] == 0 and reply["stale"] == []
        assert reply["ignored"] == reply["event_ids"] and reply["duplicates"] == []
        [why] = reply["ignored_reasons"].values()
        assert xid in why and how in why
    assert api.store.load(int(xid)) == log
    counted = api.services.metrics.events_ingested.labels("command.completed", "ignored")
    assert counted._value.get() == 2


def client_events(api: Api, xid: str, command: dict[str, Any]) -> list[dict[str, Any]]:
    named = {"execution_id": xid, "step": "start", "context": {"command_id": command["command_id"]}}
    return [
        {**named, "event_type": "command.heartbeat"},
        {**named, "event_type": "command.started"},
        {"execution_id": xid, "event_type": "execution.cancel_requested"},
    ]


@pytest.mark.parametrize("how", ["COMPLETED", "FAILED", "CANCELLED"])
def test_any_other_event_after_the_end_is_409_and_nothing_is_stored(api: Api, how: str) -> None:
    xid, command = ended(api, how)
    log = api.store.load(int(xid))
    [late] = report_wire(command, {"greeting": "late"})
    for event in client_events(api, xid, command):
        for route, body in (
            ("/api/events", event),
            ("/api/events/batch", {"events": [late, event]}),
        ):
            refused = error(api.post(route, body, role="admin"), 409, "execution_terminal")
            assert (refused["execution_id"], refused["status"]) == (xid, how), refused
            assert xid in refused["message"] and how in refused["message"]
    assert api.store.load(int(xid)) == log


def test_an_event_stored_before_the_end_is_a_duplicate_after_it_not_a_conflict(api: Api) -> None:
    xid = api.execute(HELLO)
    command = api.claim_one()
    beat = {
        "event_id": "777001",
        "execution_id": xid,
        "event_type": "command.heartbeat",
        "context": {"command_id": command["command_id"]},
    }
    assert ok(api.post("/api/events", beat, role="worker"))["stored"] == 1
    api.complete(command, {"greeting": "hi"})
    api.complete(api.claim_one(), {"loud": "HI"})
    again = ok(api.post("/api/events", beat, role="worker"))
    assert again["stored"] == 0 and again["ignored"] == []
    assert api.event_types(xid)[-1] == "execution.completed"


def test_an_event_naming_a_step_the_playbook_lacks_is_422_naming_the_step(api: Api) -> None:
    xid = api.execute(HELLO)
    before = count(api, xid)
    grant = {"execution_id": xid, "event_type": "command.started", "step": "nowhere"}
    single = error(api.post("/api/events", grant, role="worker"), 422, "validation_error")
    assert single["errors"] == [
        {"loc": ["body", "step"], "msg": f"execution {xid} has no step 'nowhere'"}
    ]
    good = {**grant, "step": "start"}
    batch = error(
        api.post("/api/events/batch", {"events": [good, grant]}, role="worker"),
        422,
        "validation_error",
    )
    assert [e["loc"] for e in batch["errors"]] == [["body", "events", 1, "step"]]
    assert count(api, xid) == before
    assert ok(api.post("/api/events", good, role="worker"))["stored"] == 1


def test_an_event_naming_an_unknown_or_foreign_command_is_refused(api: Api) -> None:
    xid = api.execute(HELLO)
    mine = api.claim_one()
    other = api.execute(HELLO)
    before, before_other = count(api, xid), count(api, other)  # xid's claim is in its log
    beat = {"execution_id": xid, "event_type": "command.heartbeat"}
    body = error(
        api.post("/api/events", {**beat, "context": {"command_id": "4242"}}, role="worker"),
        404,
        "command_not_found",
    )
    assert body["command_id"] == "4242"
    foreign = {**beat, "execution_id": other, "context": {"command_id": mine["command_id"]}}
    body = error(
        api.post("/api/events/batch", {"events": [foreign]}, role="worker"), 422, "validation_error"
    )
    assert body["errors"][0]["loc"] == ["body", "events", 0, "context", "command_id"]
    body = error(
        api.post("/api/events", {**beat, "context": {"command_id": "x1"}}, role="worker"),
        422,
        "validation_error",
    )
    assert body["errors"][0]["loc"] == ["body", "context", "command_id"]
    assert count(api, xid) == before and count(api, other) == before_other


def test_an_event_whose_run_ends_while_it_is_checked_is_not_stored_and_said_so(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    xid = api.execute(HELLO)
    api.complete(api.claim_one(), {"greeting": "hi"})
    last = api.claim_one()
    runtime = api.services.engine
    real = runtime.process

    def ended_elsewhere(reports: Any = (), *args: Any, **kw: Any) -> Any:
        if reports and reports[0].event_type == "command.heartbeat":
            # another server (or process) ends the run after the check, before the append
            other = Orchestrator(api.store, machine_id=9)
            report = report_events(
                work_item(last),
                AttemptResult(ok=True, result={"loud": "HI"}),
                other.new_id(),
                time.time(),
                "w2",
            )
            assert other.process(report).finished
        return real(reports, *args, **kw)

    monkeypatch.setattr(runtime, "process", ended_elsewhere)
    beat = {"execution_id": xid, "event_type": "command.heartbeat", "step": "shout"}
    reply = ok(api.post("/api/events", beat, role="worker"))
    assert reply["stored"] == 0 and reply["ignored"] == reply["event_ids"]
    assert "COMPLETED" in reply["ignored_reasons"][reply["event_ids"][0]]
    assert api.event_types(xid)[-1] == "execution.completed"


# -- repeated and squatted event ids (issue 8, item 1) ---------------------------------------


MACHINE = 900
"""A machine id no test server mints with (they lease the lowest free ones)."""
OTHER = MACHINE << SEQUENCE_BITS
"""Ids of that machine id, minted long ago."""


def _beat(xid: str, event_id: int, **context: Any) -> dict[str, Any]:
    return {
        "event_id": str(event_id),
        "execution_id": xid,
        "event_type": "command.heartbeat",
        "step": "start",
        "context": context,
    }


def test_an_event_id_of_another_execution_is_409_and_nothing_is_stored(api: Api) -> None:
    first, second = api.execute(HELLO), api.execute(HELLO)
    ok(api.post("/api/events", _beat(first, OTHER + 1, n=1), role="worker"))
    before = count(api, first), count(api, second)
    body = error(
        api.post(
            "/api/events/batch",
            {"events": [_beat(second, OTHER + 2), _beat(second, OTHER + 1, n=1)]},
            role="worker",
        ),
        409,
        "event_id_conflict",
    )
    assert body["event_ids"] == [str(OTHER + 1)] and set(body["execution_ids"]) == {first, second}
    assert (count(api, first), count(api, second)) == before  # OTHER + 2 neither


def test_an_event_id_repeated_with_other_content_is_409(api: Api) -> None:
    xid = api.execute(HELLO)
    ok(api.post("/api/events", _beat(xid, OTHER + 101, n=1), role="worker"))
    n = count(api, xid)
    error(
        api.post("/api/events", _beat(xid, OTHER + 101, n=2), role="worker"),
        409,
        "event_id_conflict",
    )
    assert count(api, xid) == n
    assert ok(api.post("/api/events", _beat(xid, OTHER + 101, n=1), role="worker"))[
        "duplicates"
    ] == [str(OTHER + 101)]


def lease(api: Api, worker: str = "w1", role: str = "worker") -> int:
    """A machine id leased with the token of `role`: the ids that token may mint now."""
    body = {"worker_id": worker}
    return int(ok(api.post("/api/workers/machine-id", body, role=role))["machine_id"])


def test_an_event_id_minted_in_the_future_is_422(api: Api) -> None:
    xid = api.execute(HELLO)
    own = lease(api)
    ahead = Snowflake(own, lambda: time.time() + 60)()
    body = error(api.post("/api/events", _beat(xid, ahead), role="worker"), 422, "validation_error")
    assert body["errors"][0]["loc"] == ["body", "event_id"]
    assert "ahead of the server's clock" in body["errors"][0]["msg"]
    assert "clock of the client" in body["errors"][0]["msg"]
    soon = Snowflake(own, lambda: time.time() + 1)()  # within the clock skew allowed
    assert ok(api.post("/api/events", _beat(xid, soon), role="worker"))["stored"] == 1


def test_a_squatted_id_never_displaces_the_engines_events(db_url: str) -> None:
    with start_server(db_url) as api:
        target = api.execute(HELLO)  # where the squatter posts
        orchestrator = api.services.engine.orchestrator
        mint = orchestrator.new_id
        taken: list[int] = []

        def squat(n: int) -> None:
            """Another writer of the database takes the next `n` ids the engine would mint
            (the API refuses them from clients: test_a_client_id_in_the_servers_own_...)."""
            ids = [mint() for _ in range(n)]
            api.store.append(
                [
                    ev.new_event(
                        event_id, int(target), ev.COMMAND_HEARTBEAT, time.time(), step="start"
                    )
                    for event_id in ids
                ]
            )
            replay = iter(ids)
            orchestrator.new_id = lambda: next(replay, None) or mint()
            taken.extend(ids)

        def claim(run: str) -> dict[str, Any]:
            return next(c for c in api.claim_next(limit=10) if c["execution_id"] == run)

        squat(3)  # the ids of a run's start
        run = api.execute(HELLO)
        command = claim(run)
        squat(3)  # the ids of the decisions its first report leads to
        api.complete(command, {"greeting": "hi"})
        api.complete(claim(run), {"loud": "HI"})
        assert api.status(run)["status"] == "COMPLETED"
        log = api.store.load(int(run))
        types = [e.event_type for e in log]
        assert types[0] == "execution.started" and types[-1] == "execution.completed"
        assert types.count("step.exit") == 2 and types.count("command.issued") == 2
        assert not set(taken) & {e.event_id for e in log}
        assert api.event_types(target).count("command.heartbeat") == 6  # the squatter's too
    with start_server(db_url) as again:  # rebuilt from the log alone, as after a restart
        assert ok(again.get(f"/api/executions/{run}"))["status"] == "COMPLETED"


@pytest.mark.parametrize("fixed", [None, 7])
def test_a_client_id_in_the_servers_own_id_space_is_422_and_a_cancel_still_works(
    db_url: str, fixed: int | None
) -> None:
    with start_server(db_url, machine_id=fixed) as api:
        xid = api.execute(HELLO)
        own = machine_of(api.store.load(int(xid))[0].event_id)
        assert own == (fixed if fixed is not None else api.services.machine_ids.machine_id)
        before = count(api, xid)
        squatted = Snowflake(own, time.time)()  # one the engine may mint for its cancel
        for route, body, loc in (
            ("/api/events", _beat(xid, squatted), ["body", "event_id"]),
            (
                "/api/events/batch",
                {"events": [_beat(xid, OTHER + 1), _beat(xid, squatted)]},
                ["body", "events", 1, "event_id"],
            ),
        ):
            refused = error(api.post(route, body, role="worker"), 422, "validation_error")
            assert refused["errors"][0]["loc"] == loc
            assert f"machine id {own}" in refused["errors"][0]["msg"]
            assert "leased by another process" in refused["errors"][0]["msg"]
        assert count(api, xid) == before  # OTHER + 1 neither: all or nothing
        ok(api.post("/api/events", _beat(xid, OTHER + 1), role="worker"))
        ok(api.post(f"/api/executions/{xid}/cancel"))
        assert api.status(xid)["status"] == "CANCELLED"
