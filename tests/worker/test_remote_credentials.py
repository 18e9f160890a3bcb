"""Credentials through the server: what is prefetched, the cache, and how failures read."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from milepost.client import ServerRefused, ServerUnavailable
from milepost.playbook.load import load_text
from milepost.worker.remote_credentials import (
    CredentialRefused,
    CredentialsUnavailable,
    RemoteCredentials,
    names_for,
)
from tests.shared import wait_for_async
from tests.worker.fakes import PLAYBOOK, FakeClient, FakeTools, command, make, running

PG = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: pg, path: tests/pg}
keychain:
  - {name: api, kind: credential, credential: api_key}
  - {name: static, kind: static, map: {a: 1}}
workbook:
  - {name: report, tool: {kind: postgres, auth: warehouse, query: "select 1"}}
workflow:
  - step: start
    tool: {kind: postgres, auth: "{{ workload.pg_auth }}", query: "select 1"}
    next: mapped
  - step: mapped
    tool: {kind: postgres, auth: {credential: "pg_{{ workload.env }}"}, query: "select 1"}
    next: wb
  - step: wb
    tool: {kind: workbook, name: report}
    next: broken
  - step: broken
    tool: {kind: postgres, auth: "{{ nothing.here }}", query: "select 1"}
"""


def test_names_for_finds_keychain_and_postgres_auth_even_templated() -> None:
    playbook = load_text(PG)
    context = {"workload": {"pg_auth": "pg_main", "env": "prod"}}
    assert names_for(playbook, "start", context) == {"api_key", "pg_main"}
    assert names_for(playbook, "mapped", context) == {"api_key", "pg_prod"}
    assert names_for(playbook, "wb", context) == {"api_key", "warehouse"}
    assert names_for(playbook, "broken", context) == {"api_key"}, "a guess that fails is skipped"


def test_names_for_finds_a_nats_auth() -> None:
    playbook = load_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: n, path: tests/n}\n"
        "workflow:\n  - step: start\n    tool: {kind: nats, auth: '{{ workload.nats }}',"
        " operation: kv_get, bucket: b, key: k}\n"
    )
    assert names_for(playbook, "start", {"workload": {"nats": "nats_main"}}) == {"nats_main"}


def test_names_for_finds_http_auth_too() -> None:
    playbook = load_text(
        PG.replace(
            'kind: postgres, auth: "{{ workload.pg_auth }}", query: "select 1"',
            'kind: http, auth: "{{ workload.api }}", url: http://h/x',
        )
    )
    assert names_for(playbook, "start", {"workload": {"api": "bearer_x"}}) == {
        "api_key",
        "bearer_x",
    }


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_cache_keeps_values_for_its_ttl_and_falls_back_to_a_blocking_fetch() -> None:
    calls: list[str] = []
    blocking: list[str] = []

    async def fetch(name: str) -> dict[str, Any] | None:
        calls.append(name)
        return {"password": f"pw-{name}", "type": "postgres"} if name != "gone" else None

    def fetch_sync(name: str) -> dict[str, Any] | None:
        blocking.append(name)
        return {"password": "late"}

    clock = Clock()
    creds = RemoteCredentials(fetch, fetch_sync, clock, ttl=30)

    async def scenario() -> None:
        await creds.prefetch(["a", "gone", "a"])
        await creds.prefetch(["a"])
        assert calls == ["a", "gone"]
        assert creds("a") == {"password": "pw-a", "type": "postgres"}
        assert creds("gone") is None
        assert creds("unforeseen") == {"password": "late"} and blocking == ["unforeseen"]
        clock.now += 31
        await creds.prefetch(["a"])
        assert calls == ["a", "gone", "a"]

    asyncio.run(scenario())


def test_failures_are_transient_or_refused() -> None:
    async def down(name: str) -> dict[str, Any] | None:
        raise ServerUnavailable("down")

    async def forbidden(name: str) -> dict[str, Any] | None:
        raise ServerRefused(403, "forbidden", "role 'viewer' may not read credential data")

    async def scenario() -> None:
        with pytest.raises(CredentialsUnavailable):
            await RemoteCredentials(down, None, Clock()).prefetch(["x"])
        with pytest.raises(CredentialRefused, match="forbidden"):
            await RemoteCredentials(forbidden, None, Clock()).prefetch(["x"])

    asyncio.run(scenario())
    with pytest.raises(CredentialsUnavailable, match="not fetched"):
        RemoteCredentials(down, None, Clock())("x")


def test_a_refused_credential_fails_the_attempt_without_running_it() -> None:
    class Refusing(FakeClient):
        async def credential(self, name: str) -> dict[str, Any] | None:
            raise ServerRefused(403, "forbidden", "no")

    async def scenario() -> None:
        client = Refusing({("tests/pg", 1): PG})
        worker, client, tools, _ = make(client)
        client.queue.append(command(901, path="tests/pg", context={"workload": {"pg_auth": "x"}}))
        async with running(worker):
            await wait_for_async(lambda: bool(client.reports))
        [event] = client.reported_events()
        assert event["event_type"] == "command.failed"
        assert event["result"]["context"]["error"]["kind"] == "credential"
        assert tools.calls == []

    asyncio.run(scenario())


def test_a_command_that_cannot_be_prepared_is_given_back_after_a_pause() -> None:
    class CatalogDown(FakeClient):
        async def resource(self, path: str, version: int | None = None) -> dict[str, Any]:
            self.resources.append((path, version))
            raise ServerRefused(503, "internal", "database down")

    async def scenario() -> None:
        worker, client, tools, clock = make(CatalogDown({("tests/w", 1): PLAYBOOK}))
        client.queue.append(command(902, epoch=5))
        async with running(worker):
            await wait_for_async(lambda: 902 in worker.jobs)
            assert client.releases == []
            await clock.run_until(lambda: bool(client.releases))
        assert client.releases == [(902, 5)] and client.reports == [] and tools.calls == []
        assert 0.1 in clock.sleeps, "a pause before the release"

    asyncio.run(scenario())


def test_a_result_that_is_not_json_is_reported_as_text() -> None:
    class Odd(FakeTools):
        async def run(self, call: Any) -> Any:
            from milepost.tools.base import ToolResult

            return ToolResult(data={"when": {1, 2}.__class__.__name__, "obj": object()})

    async def scenario() -> None:
        worker, client, _, _ = make(tools=Odd())
        client.queue.append(command(903))
        async with running(worker):
            await wait_for_async(lambda: bool(client.reports))
        result = client.reported_events()[0]["result"]["context"]["result"]
        assert result["when"] == "set" and result["obj"].startswith("<object object")

    asyncio.run(scenario())
