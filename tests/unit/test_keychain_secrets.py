"""Keychain `kind: secrets` (DSL 12): fields fetched from a provider when the keychain
resolves, masked like every keychain value; `oauth2` and `google_id_token` refused."""

from __future__ import annotations

import asyncio
import textwrap
from typing import Any

import pytest

from milepost.attempt import keychain
from milepost.attempt.runner import run_attempt
from milepost.core.work import WorkItem
from milepost.errors import MilepostError, PlaybookInvalid
from milepost.playbook import load, model
from milepost.tools.base import ToolCall, ToolResult
from milepost.worker import remote_credentials

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t}\n"
SECRET = "env-s3cr3t-42"


def playbook(entries: str) -> model.Playbook:
    body = textwrap.indent(textwrap.dedent(entries).strip("\n"), "  ")
    return load.load_text(
        HEADER + f"keychain:\n{body}\nworkflow:\n"
        "  - step: x\n    tool: {kind: python, code: t, input: {v: '{{ keychain.s.value }}'}}\n"
    )


def problems(entries: str) -> list[str]:
    with pytest.raises(PlaybookInvalid) as info:
        playbook(entries)
    return info.value.problems


def test_a_secrets_entry_loads_with_its_provider_and_map() -> None:
    pb = playbook("- {name: s, kind: secrets, provider: env, map: {value: API_TOKEN}}")
    (entry,) = pb.keychain
    assert (entry.kind, entry.provider, entry.map) == ("secrets", "env", {"value": "API_TOKEN"})


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "{name: s, kind: secrets, map: {value: X}}",
            "field 'provider' is required for kind 'secrets'",
        ),
        ("{name: s, kind: secrets, provider: env}", "field 'map' is required for kind 'secrets'"),
        (
            "{name: s, kind: secrets, provider: vault, map: {value: X}}",
            "expected one of env, milepost, gcp, aws, azure, got 'vault'",
        ),
    ],
    ids=["no-provider", "no-map", "unknown-provider"],
)
def test_a_secrets_entry_needs_a_known_provider_and_a_map(entry: str, message: str) -> None:
    assert any(message in p for p in problems(f"- {entry}")), problems(f"- {entry}")


@pytest.mark.parametrize("kind", ["oauth2", "google_id_token"])
def test_token_minting_kinds_are_rejected_at_load_pointing_at_an_http_step(kind: str) -> None:
    (found,) = problems(f"- {{name: s, kind: {kind}, client_id: a, client_secret: b}}")
    assert f"keychain kind {kind!r} is not supported" in found
    assert "fetch the token in an http step" in found


def _resolve(
    entries: str,
    credentials: Any = None,
    environ: Any = None,
    context: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return keychain.resolve(playbook(entries), context or {}, credentials, environ)


def test_provider_env_reads_the_workers_environment_variable() -> None:
    resolved = _resolve(
        "- {name: s, kind: secrets, provider: env, map: {value: API_TOKEN}}",
        environ={"API_TOKEN": SECRET},
    )
    assert resolved == {"s": {"value": SECRET}}


def test_provider_env_paths_are_templates() -> None:
    resolved = _resolve(
        "- {name: s, kind: secrets, provider: env, map: {value: '{{ workload.var }}'}}",
        environ={"OTHER": SECRET},
        context={"workload": {"var": "OTHER"}},
    )
    assert resolved == {"s": {"value": SECRET}}


def test_provider_env_names_an_unset_variable() -> None:
    with pytest.raises(MilepostError) as info:
        _resolve("- {name: s, kind: secrets, provider: env, map: {value: NOT_SET}}", environ={})
    assert info.value.message == (
        "keychain 's': map.value: environment variable 'NOT_SET' is not set on the worker"
    )


def test_provider_milepost_reads_a_field_of_a_registered_credential() -> None:
    vault = {"pg.main": {"type": "postgres", "password": SECRET, "port": 5432}}
    resolved = _resolve(
        "- {name: s, kind: secrets, provider: milepost,"
        " map: {value: pg.main.password, port: pg.main.port}}",
        credentials=vault.get,
    )
    assert resolved == {"s": {"value": SECRET, "port": 5432}}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nothing.password", "credential 'nothing' is not registered"),
        ("pg.user", "credential 'pg' has no field 'user'"),
        ("pg.type", "credential 'pg' has no field 'type'"),
        ("pg", "expected '<credential>.<field>', got 'pg'"),
    ],
)
def test_provider_milepost_names_what_is_missing(path: str, message: str) -> None:
    vault = {"pg": {"type": "postgres", "password": SECRET}}
    with pytest.raises(MilepostError) as info:
        _resolve(
            f"- {{name: s, kind: secrets, provider: milepost, map: {{value: {path}}}}}",
            credentials=vault.get,
        )
    assert info.value.message == f"keychain 's': map.value: {message}"


@pytest.mark.parametrize("provider", ["gcp", "aws", "azure"])
def test_a_cloud_provider_without_its_extra_fails_at_run_time_naming_it(provider: str) -> None:
    pb = playbook(f"- {{name: s, kind: secrets, provider: {provider}, map: {{value: p/x}}}}")
    with pytest.raises(MilepostError) as info:
        keychain.resolve(pb, {}, None)
    assert f"pip install 'milepost[{provider}]'" in info.value.message
    assert info.value.message.startswith(f"keychain 's': provider {provider!r}")


class _Echo:
    def __init__(self) -> None:
        self.calls: list[ToolCall] = []

    async def run(self, call: ToolCall) -> ToolResult:
        self.calls.append(call)
        return ToolResult(data={"echo": call.input["v"], "said": f"it is {call.input['v']}"})


def _item() -> WorkItem:
    return WorkItem(
        command_id=7,
        execution_id=1,
        step="x",
        run=1,
        index=-1,
        attempt=1,
        idempotency_key="k",
        context={"workload": {}, "ctx": {}, "iter": {}, "execution_id": "1"},
        args={},
    )


async def _sleep(delay: float) -> None:
    return None


def test_fetched_values_reach_the_tool_and_are_masked_in_the_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MILEPOST_TEST_SECRET", SECRET)
    pb = playbook("- {name: s, kind: secrets, provider: env, map: {value: MILEPOST_TEST_SECRET}}")
    tools = _Echo()
    out = asyncio.run(run_attempt(pb, _item(), tools, sleep=_sleep))
    assert out.ok, out.error
    assert tools.calls[0].input["v"] == SECRET
    assert out.result == {"echo": "***", "said": "it is ***"}


def test_a_secret_that_cannot_be_fetched_fails_the_attempt_as_a_keychain_error() -> None:
    pb = playbook("- {name: s, kind: secrets, provider: gcp, map: {value: projects/p/x}}")
    tools = _Echo()
    out = asyncio.run(run_attempt(pb, _item(), tools, sleep=_sleep))
    assert not out.ok and out.error is not None
    assert out.error["kind"] == "keychain"
    assert "milepost[gcp]" in out.error["message"]
    assert tools.calls == []


def test_a_remote_worker_prefetches_the_credentials_a_milepost_provider_reads() -> None:
    pb = playbook(
        "- {name: s, kind: secrets, provider: milepost,"
        " map: {value: pg.main.password, other: '{{ workload.c }}.token'}}\n"
        "- {name: e, kind: secrets, provider: env, map: {value: not.a.credential}}"
    )
    names = remote_credentials.names_for(pb, "x", {"workload": {"c": "api"}})
    assert names == {"pg.main", "api"}
