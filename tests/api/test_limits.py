"""Bad input at the edge (issue 8, items 10-12): every oversized, non-finite, too deep or
malformed value gets a 4xx naming the field and the limit, and nothing is stored."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient

from milepost.api import checks, edge
from milepost.api.routers import channel
from milepost.core import events as ev
from milepost.credentials import CredentialNameInvalid, Vault, new_key
from milepost.errors import MilepostError
from milepost.store.sqlite import SQLiteStore
from tests.api.support import HELLO, Api, error, ok, start_server
from tests.api.test_cli import MILEPOST, cli
from tests.unit.test_yaml_expansion import amplified

_ids = iter(range(5 * 10**15, 6 * 10**15))


def _bomb(levels: int) -> str:
    rows = ["  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    rows += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return HELLO.replace("workload: {name: World}", "workload:\n" + "\n".join(rows), 1)


def test_register_refuses_an_alias_bomb_with_the_limit_named(api: Api) -> None:
    body = error(api.post("/api/catalog/register", {"content": _bomb(6)}), 422, "playbook_invalid")
    assert len(body["problems"]) == 1
    assert "MILEPOST_MAX_YAML_ALIASES" in body["problems"][0]
    assert api.store.list_playbooks() == []


def test_register_and_validate_refuse_a_document_that_expands_past_the_byte_limit(
    api: Api,
) -> None:
    # issue 33 item 5: a 1 MB text aliasing a 1 MiB string a thousand times passed the
    # node count; a run of it then took the server past 3 GB
    text = amplified(1000)
    expected = "bytes at the alias *s (line 6; MILEPOST_MAX_EXPANDED_BYTES)"
    body = error(api.post("/api/catalog/register", {"content": text}), 422, "playbook_invalid")
    assert len(body["problems"]) == 1 and expected in body["problems"][0]
    assert api.store.list_playbooks() == []
    body = error(api.post("/api/catalog/validate", {"content": text}), 422, "playbook_invalid")
    [problem] = body["problems"]
    assert expected in problem["message"] and problem["line"] == 6


def test_execute_refuses_a_workload_past_the_expanded_limit(db_url: str) -> None:
    with start_server(db_url, max_expanded_bytes=1000) as api:
        api.register()
        over = {"path": "tests/hello", "workload": {"pad": "x" * 1000}}
        [err] = _errors(api.post("/api/execute", over))
        assert err["loc"] == ["body", "workload"]
        assert "expands to 1006 bytes, over the limit of 1000" in err["msg"]
        assert "MILEPOST_MAX_EXPANDED_BYTES" in err["msg"]
        assert ok(api.get("/api/executions"))["items"] == []
        ok(api.post("/api/execute", {"path": "tests/hello", "workload": {"pad": "x" * 900}}))


# -- item 11: times, non-finite numbers, nesting ---------------------------------------------


def _raw(api: Api, path: str, text: str, role: str = "admin") -> httpx2.Response:
    """A body sent as written: `NaN` and `Infinity` are no JSON, and json= would refuse them."""
    return api.client.post(
        path,
        content=text.encode(),
        headers={**api.headers(role), "Content-Type": "application/json"},
    )


def _event(xid: str, **over: Any) -> dict[str, Any]:
    return {"execution_id": xid, "event_type": "command.heartbeat", "step": "start", **over}


def _errors(response: httpx2.Response) -> list[dict[str, Any]]:
    return list(error(response, 422, "validation_error")["errors"])


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (1e20, ""),
        (1e308, ""),
        (1_700_000_000_000, "epoch milliseconds"),
        (-1, ""),
        ("1e20", ""),
        ("1900-01-01T00:00:00Z", ""),
    ],
)
def test_a_time_out_of_range_is_refused_as_not_epoch_seconds(
    api: Api, value: Any, hint: str
) -> None:
    xid = api.execute()
    before = api.store.event_count(int(xid))
    [err] = _errors(api.post("/api/events", _event(xid, created_at=value), role="worker"))
    assert err["loc"] == ["body", "created_at"]
    assert "epoch seconds" in err["msg"] and "2000-01-01 and 2200-01-01" in err["msg"]
    assert hint in err["msg"]
    assert api.store.event_count(int(xid)) == before
    ok(api.get(f"/api/executions/{xid}"))


def test_a_time_no_datetime_holds_already_stored_reads_as_null(api: Api) -> None:
    # written before times were checked: the execution answered 500 for good
    xid = api.execute()
    api.store.append([ev.new_event(next(_ids), int(xid), "command.heartbeat", 1e20, step="start")])
    page = ok(api.get(f"/api/executions/{xid}"))
    assert page["events"][-1]["event_type"] == "command.heartbeat"
    assert page["events"][-1]["created_at"] is None


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused_in_every_free_json_field(api: Api, literal: str) -> None:
    # a literal NaN/Infinity is refused as the body is parsed, with its exact place; 1e999
    # is JSON (a float too large: inf) and is refused by the field's check
    xid = api.execute()
    before = api.store.event_count(int(xid))
    bodies = [
        (
            "/api/events",
            f'{{"execution_id": "{xid}", "event_type": "command.heartbeat", '
            f'"meta": {{"x": [{literal}]}}}}',
            ["body", "meta"],
            ["x", 0],
        ),
        (
            "/api/events",
            f'{{"execution_id": "{xid}", "event_type": "command.heartbeat", '
            f'"result": {{"context": {{"x": {literal}}}}}}}',
            ["body", "result", "context"],
            ["x"],
        ),
        (
            "/api/events/batch",
            f'{{"events": [{{"execution_id": "{xid}", '
            f'"event_type": "command.heartbeat", "context": {{"x": {literal}}}}}]}}',
            ["body", "events", 0, "context"],
            ["x"],
        ),
        (
            "/api/execute",
            f'{{"path": "tests/hello", "workload": {{"n": {literal}}}}}',
            ["body", "workload"],
            ["n"],
        ),
        (
            "/api/credentials",
            f'{{"name": "c", "type": "t", "data": {{"n": {literal}}}}}',
            ["body", "data"],
            ["n"],
        ),
        (
            "/api/commands/claim",
            f'{{"worker_id": "w1", "lease_seconds": {literal}}}',
            ["body", "lease_seconds"],
            [],
        ),
    ]
    for path, text, field, inner in bodies:
        [err] = _errors(_raw(api, path, text))
        if literal == "1e999":
            assert err["loc"] == field, (path, err)
            assert "finite" in err["msg"] or "less than or equal" in err["msg"], err
        else:
            assert err["loc"] == field + inner, (path, err)
            assert err["msg"] == "NaN and Infinity are not JSON: numbers must be finite"
    assert api.store.event_count(int(xid)) == before
    assert len(ok(api.get("/api/executions"))["items"]) == 1
    assert api.store.list_credentials() == []
    assert api.store.get_command(int(api.claim_one()["command_id"])) is not None


def test_nan_inside_a_string_is_only_text(api: Api) -> None:
    xid = api.execute()
    text = f'{{"execution_id": "{xid}", "event_type": "command.heartbeat", "meta": {{"v": "NaN"}}}}'
    ok(_raw(api, "/api/events", text, role="worker"))
    assert api.store.load(int(xid))[-1].meta == {"v": "NaN"}


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_nesting_beyond_the_limit_is_refused_before_anything_is_stored(api: Api) -> None:
    # 900 deep was accepted, and then every claim of its command answered 500 RecursionError
    body = {"path": "tests/hello", "workload": _nested(900)}
    api.register()
    [err] = _errors(api.post("/api/execute", body))
    assert err["loc"] == ["body", "workload"]
    assert "nested deeper than 64 levels (MILEPOST_MAX_JSON_DEPTH)" in err["msg"]
    assert ok(api.get("/api/executions"))["items"] == []
    xid = api.execute()
    [err] = _errors(api.post("/api/events", _event(xid, meta=_nested(65)), role="worker"))
    assert err["loc"] == ["body", "meta"]
    ok(api.post("/api/events", _event(xid, meta=_nested(64)), role="worker"))


def test_the_nesting_limit_is_a_setting(db_url: str) -> None:
    # the playbook's YAML nests 5 levels (root, workflow, step, tool, input)
    with start_server(db_url, max_json_depth=5) as api:
        api.register()
        [err] = _errors(api.post("/api/execute", {"path": "tests/hello", "workload": _nested(6)}))
        assert "nested deeper than 5 levels" in err["msg"]
        ok(api.post("/api/execute", {"path": "tests/hello", "workload": _nested(5)}))


# -- item 12: NUL, offsets, 500 bodies, body size, credential names --------------------------


def test_nul_is_refused_in_every_string_that_reaches_the_database(api: Api) -> None:
    xid = api.execute()
    before = api.store.event_count(int(xid))
    cases = [
        (api.post("/api/events", _event(xid, step="st\x00art"), role="worker"), ["body", "step"]),
        (
            api.post("/api/events", _event(xid, worker_id="w\x00"), role="worker"),
            ["body", "worker_id"],
        ),
        (
            api.post("/api/commands/claim", {"worker_id": "w\x001"}, role="worker"),
            ["body", "worker_id"],
        ),
        (
            api.post("/api/commands/claim", {"worker_id": "w1", "pool": "p\x00"}, role="worker"),
            ["body", "pool"],
        ),
        (api.get("/api/executions", params={"path": "tests/\x00hello"}), ["query", "path"]),
        (api.get("/api/executions", params={"status": "\x00"}), ["query", "status"]),
        (api.post("/api/catalog/list", {"path": "a\x00"}), ["body", "path"]),
        (
            api.post("/api/credentials", {"name": "c", "type": "t\x00", "data": {}}),
            ["body", "type"],
        ),
        (api.get("/api/credentials/a%00b"), ["path"]),
        (
            api.post("/api/workers/machine-id", {"worker_id": "w\x00"}, role="worker"),
            ["body", "worker_id"],
        ),
    ]
    for response, loc in cases:
        [err] = _errors(response)
        assert err["loc"] == loc and err["msg"].endswith("must not contain NUL (\\x00)"), err
    assert api.store.event_count(int(xid)) == before
    assert api.store.list_credentials() == []
    # inside free JSON a NUL is only a character: it is stored escaped, as JSON text
    ok(api.post("/api/events", _event(xid, meta={"k": "a\x00b"}), role="worker"))
    assert api.store.load(int(xid))[-1].meta == {"k": "a\x00b"}


def test_every_request_body_is_a_checked_model(api: Api) -> None:
    """The class of the bug schemathesis found in `POST /api/workers/machine-id`: a body
    model that is not a `checks.Checked` takes NUL (a 500 on PostgreSQL) and whatever
    else the edge refuses for every other route."""
    routes = [context.original_route for context in iter_route_contexts(api.client.app.routes)]  # type: ignore[attr-defined]
    bodies = {
        route.path: param.field_info.annotation
        for route in routes
        if isinstance(route, APIRoute)
        for param in route.dependant.body_params
    }
    assert "/api/events/batch" in bodies and "/api/workers/machine-id" in bodies

    def checked(model: object) -> bool:  # an optional body (`Model | None`) is its model
        models = [m for m in typing.get_args(model) if m is not type(None)] or [model]
        return all(isinstance(m, type) and issubclass(m, checks.Checked) for m in models)

    unchecked = {path: model for path, model in bodies.items() if not checked(model)}
    assert unchecked == {}


def test_offsets_past_64_bits_are_refused(api: Api) -> None:
    xid = api.execute()
    [err] = _errors(api.get("/api/executions", params={"offset": 2**63}))
    assert err["loc"] == ["query", "offset"]
    [err] = _errors(api.get(f"/api/executions/{xid}", params={"events_after": 2**63}))
    assert err["loc"] == ["query", "events_after"]
    [err] = _errors(api.post("/api/catalog/resource", {"path": "tests/hello", "version": 2**63}))
    assert err["loc"] == ["body", "version"]
    assert ok(api.get("/api/executions", params={"offset": 2**63 - 1}))["items"] == []
    command = api.claim_one()
    for action in ("heartbeat", "release"):
        [err] = _errors(
            api.post(
                f"/api/commands/{command['command_id']}/{action}",
                {"worker_id": "w1", "epoch": 2**63},
                role="worker",
            )
        )
        assert err["loc"] == ["body", "epoch"]


def test_a_500_says_nothing_of_the_exception_but_a_request_id(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "postgresql://milepost:hunter2@db.internal:5432/milepost"

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError(f"connection to {secret} failed")

    monkeypatch.setattr(api.store, "list_executions", broken)
    # the server's own answer, not the exception TestClient re-raises by default
    client = TestClient(api.client.app, raise_server_exceptions=False)
    response = client.get("/api/executions", headers=api.headers("admin"))
    body = error(response, 500, "internal")
    assert "hunter2" not in response.text and "RuntimeError" not in response.text
    assert body["request_id"] in body["message"]
    assert any(
        getattr(r, "request_id", None) == body["request_id"] and r.exc_info for r in caplog.records
    )

    class Odd(MilepostError):
        code = "odd"

    def odd(*_: Any, **__: Any) -> Any:
        raise Odd(f"cannot reach {secret}", url=secret)

    monkeypatch.setattr(api.store, "list_executions", odd)
    response = client.get("/api/executions", headers=api.headers("admin"))
    error(response, 500, "internal")
    assert "hunter2" not in response.text


def test_a_body_over_the_limit_is_413_naming_it(db_url: str) -> None:
    with start_server(db_url, max_body_bytes=20_000) as api:
        xid = api.execute()
        before = api.store.event_count(int(xid))
        big = {"pad": "x" * 30_000}
        for path, body in [
            ("/api/events", _event(xid, meta=big)),
            ("/api/catalog/register", {"content": HELLO + "#" + "x" * 30_000}),
            ("/api/credentials", {"name": "c", "type": "t", "data": big}),
        ]:
            reply = error(api.post(path, body, role="admin"), 413, "too_large")
            assert reply["limit"] == 20_000 and "MILEPOST_MAX_BODY_BYTES" in reply["message"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
            yield b'{"execution_id": "%s", "event_type": "command.heartbeat", "meta": {"pad": "' % (
                xid.encode()
            )
            for _ in range(30):
                yield b"x" * 1000
            yield b'"}}'

        response = api.client.post(
            "/api/events",
            content=chunks(),
            headers={**api.headers("worker"), "Content-Type": "application/json"},
        )
        assert error(response, 413, "too_large")["limit"] == 20_000
        assert api.store.event_count(int(xid)) == before
        assert api.store.list_credentials() == [] and len(api.store.list_playbooks()) == 1
        ok(api.post("/api/events", _event(xid, meta={"pad": "x" * 10_000}), role="worker"))


def test_a_channel_message_over_the_limit_is_413_and_the_socket_stays_open(db_url: str) -> None:
    with start_server(db_url, max_body_bytes=20_000) as api:
        xid = api.execute()
        with api.client.websocket_connect(channel.PATH, headers=api.headers("worker")) as ws:
            events = [_event(xid, meta={"pad": "x" * 30_000})]
            ws.send_text(json.dumps({"id": 7, "body": {"events": events}}))
            reply = json.loads(ws.receive_text())
            assert reply["id"] == 7 and reply["status"] == 413
            assert reply["body"]["code"] == "too_large"
            assert reply["body"]["limit"] == 20_000
            ws.send_text(json.dumps({"id": 8, "body": {"events": [_event(xid)]}}))
            assert json.loads(ws.receive_text())["status"] == 200


@pytest.mark.parametrize("name", ["a/b", "..", ".hidden", "a b", "x" * 129, "é", ""])
def test_a_credential_name_breaking_the_rule_is_refused(api: Api, name: str) -> None:
    [err] = _errors(api.post("/api/credentials", {"name": name, "type": "t", "data": {}}))
    assert err["loc"] == ["body", "name"]
    assert "letters, digits, '.', '_' and '-', not starting with a dot" in err["msg"]
    assert api.store.list_credentials() == []


def test_credential_names_that_follow_the_rule_can_be_read_and_deleted(api: Api) -> None:
    for name in ["pg_main", "api-key.v2", "A1", "_x", "x" * 128]:
        ok(api.post("/api/credentials", {"name": name, "type": "t", "data": {"k": 1}}))
        assert ok(api.get(f"/api/credentials/{name}"))["name"] == name
        assert ok(api.call("DELETE", f"/api/credentials/{name}")) == {"deleted": True}


def test_the_cli_and_the_vault_refuse_a_bad_credential_name(tmp_path: Path) -> None:
    env = {"MILEPOST_SECRET_KEY": new_key()}
    done = subprocess.run(
        [
            MILEPOST,
            "credential",
            "set",
            "a/b",
            "--type",
            "t",
            "--data",
            "{}",
            "--db",
            str(tmp_path / "m.db"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert done.returncode != 0
    assert "not starting with a dot" in done.stderr
    with pytest.raises(CredentialNameInvalid, match="not starting with a dot"):
        Vault(SQLiteStore(str(tmp_path / "v.db")), env["MILEPOST_SECRET_KEY"]).put("..", "t", {})


def test_validate_prints_the_limit_and_exits_1(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_bomb(6))
    done = subprocess.run(
        [MILEPOST, "validate", str(bomb)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert "MILEPOST_MAX_YAML_ALIASES" in done.stderr


def test_run_refuses_an_alias_bomb_before_anything_is_written(tmp_path: Path) -> None:
    bomb, db = tmp_path / "bomb.yaml", tmp_path / "m.db"
    bomb.write_text(_bomb(6))
    done = subprocess.run(
        [MILEPOST, "run", str(bomb), "--db", str(db)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, (done.stdout, done.stderr)  # refused: the run failed
    assert "MILEPOST_MAX_YAML_ALIASES" in done.stdout + done.stderr
    assert not db.exists()


def test_every_cli_entry_refuses_an_amplified_document_naming_the_file_and_line(
    tmp_path: Path,
) -> None:
    amp, db = tmp_path / "amp.yaml", tmp_path / "m.db"
    amp.write_text(amplified(300, per_list=330))  # 1 MB that expands to about 97 GiB
    expected = f"{amp}: 1 problem(s):"
    checked = cli("validate", str(amp))
    assert checked.returncode == 1 and expected in checked.stderr, checked.stderr
    assert "at the alias *s (line 6; MILEPOST_MAX_EXPANDED_BYTES)" in checked.stderr
    ran = cli("run", str(amp), "--db", str(db))
    assert ran.returncode == 1 and expected in ran.stderr, ran.stderr
    assert not db.exists()
    # refused before it asks the server anything: no server at that address
    registered = cli("register", str(amp), "--server", "http://127.0.0.1:9")
    assert registered.returncode == 2 and expected in registered.stderr, registered.stderr


def test_run_refuses_a_set_value_that_expands_past_the_limit(tmp_path: Path) -> None:
    db, hello = tmp_path / "m.db", tmp_path / "hello.yaml"
    hello.write_text(HELLO)
    bomb = "[&a [" + ", ".join(["lol"] * 10) + "]"  # then b to h, ten of the one before
    bomb += "".join(f", &{chr(n)} [{', '.join([f'*{chr(n - 1)}'] * 10)}]" for n in range(98, 105))
    done = cli("run", str(hello), "--db", str(db), "--set", f"name={bomb}]")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "MILEPOST_MAX_EXPANDED_BYTES" in done.stderr
    assert not db.exists()


def test_a_nan_split_across_chunks_of_a_streamed_body_is_found(api: Api) -> None:
    xid = api.execute()
    before = api.store.event_count(int(xid))

    def chunks() -> Iterator[bytes]:
        yield b'{"execution_id": "%s", "event_type": "command.heartbeat", "meta": {"x": Na' % (
            xid.encode()
        )
        yield b"N}}"

    response = api.client.post(
        "/api/events",
        content=chunks(),
        headers={**api.headers("worker"), "Content-Type": "application/json"},
    )
    assert _errors(response)[0]["loc"] == ["body", "meta", "x"]
    assert api.store.event_count(int(xid)) == before


def test_the_edge_finds_a_word_split_between_two_messages() -> None:
    messages = iter(
        [
            {"type": "http.request", "body": b'{"a": [1, Infin', "more_body": True},
            {"type": "http.request", "body": b"ity]}", "more_body": False},
        ]
    )

    async def receive() -> dict[str, Any]:
        return next(messages)

    body = edge._Body(receive, 1000)

    async def read_all() -> None:
        await body.receive()
        await body.receive()

    with pytest.raises(edge.Refused) as info:
        asyncio.run(read_all())
    assert info.value.error.fields["errors"] == [
        {"loc": ["body", "a", 1], "msg": "NaN and Infinity are not JSON: numbers must be finite"}
    ]


def test_an_unknown_query_parameter_is_422_naming_it(api: Api) -> None:
    """Schemathesis sent `?=true`: ignored, as a misspelt `?limt=5` was, without a word."""
    for params, name in (({"limt": "5"}, "limt"), ({"": "true"}, "")):
        [err] = _errors(api.get("/api/executions", params=params))
        assert err["loc"] == ["query", name] and "unknown query parameter" in err["msg"], err
        assert "limit" in err["msg"]  # it says what the route takes
    assert ok(api.get("/api/executions", params={"limit": "5"}))["limit"] == 5


def test_a_query_parameter_given_twice_is_422_naming_it(api: Api) -> None:
    """Schemathesis sent `?path=true&path=null`: the last one was used without a word."""
    for route in ("/api/executions", "/api/usage"):
        [err] = _errors(api.get(route, params=[("path", "a"), ("path", "b")]))
        assert err["loc"] == ["query", "path"] and "more than once" in err["msg"], err
    assert ok(api.get("/api/usage", params={"path": "a"})) == {"items": []}


def test_a_misspelt_status_filter_is_422_not_an_empty_list(api: Api) -> None:
    [err] = _errors(api.get("/api/executions", params={"status": "runing"}))
    assert err["loc"] == ["query", "status"], err
    assert ok(api.get("/api/executions", params={"status": "FAILED"}))["items"] == []
