"""http `auth: <credential>` and `verify_ssl` (DSL 12) against local servers: a plain one
that records and echoes the request headers, and an HTTPS one with a self-signed
certificate made here."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from milepost.credentials import Vault, new_key
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from milepost.tools import base
from milepost.tools.runtime import ToolRuntime

TOKEN = "tok-9f8e7d6c5b4a"


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]]

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.seen.append(headers)  # type: ignore[attr-defined]
        body = json.dumps({"headers": headers}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Echo-Auth", headers.get("authorization", ""))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the access log
        pass


class _Server(ThreadingHTTPServer):
    seen: list[dict[str, str]]


def _serve(server: _Server) -> Iterator[_Server]:
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def server() -> Iterator[_Server]:
    yield from _serve(_Server(("127.0.0.1", 0), _Recorder))


def _url(server: _Server, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{server.server_address[1]}/x"


def _call(**config: Any) -> base.ToolCall:
    return base.ToolCall("http", config, {}, {}, "idem-1", timeout=10)


def _run(
    call: base.ToolCall, credentials: dict[str, dict[str, Any]] | None = None
) -> base.ToolResult:
    async def go() -> base.ToolResult:
        async with ToolRuntime(1, credentials=(credentials or {}).get) as runtime:
            return await runtime.run(call)

    return asyncio.run(go())


BASIC = base64.b64encode(b"ann:pw-12345").decode()


@pytest.mark.parametrize(
    ("credential", "sent"),
    [
        ({"type": "bearer", "token": TOKEN}, {"authorization": f"Bearer {TOKEN}"}),
        (
            {"type": "basic", "username": "ann", "password": "pw-12345"},
            {"authorization": f"Basic {BASIC}"},
        ),
        (
            {"type": "basic", "user": "ann", "password": "pw-12345"},
            {"authorization": f"Basic {BASIC}"},
        ),
        ({"type": "api_key", "key": "X-Api-Key", "value": "key-5678"}, {"x-api-key": "key-5678"}),
        (
            {"type": "header", "X-Team-Token": "team-abcd", "X-Org": "org-efgh"},
            {"x-team-token": "team-abcd", "x-org": "org-efgh"},
        ),
    ],
    ids=["bearer", "basic-username", "basic-user", "api_key", "header"],
)
def test_auth_adds_the_credentials_headers_and_masks_them_in_the_result(
    server: _Server, credential: dict[str, Any], sent: dict[str, str]
) -> None:
    result = _run(_call(url=_url(server), auth="api"), {"api": credential})
    assert result.ok, result.error
    (received,) = server.seen
    assert {k: received[k] for k in sent} == sent
    echoed = json.dumps([result.data, result.http])
    for value in sent.values():
        assert value.split()[-1] not in echoed
    assert "***" in json.dumps(result.data["data"]["headers"])


def test_auth_as_a_mapping_names_the_credential_too(server: _Server) -> None:
    result = _run(
        _call(url=_url(server), auth={"credential": "api"}),
        {"api": {"type": "bearer", "token": TOKEN}},
    )
    assert result.ok, result.error
    assert server.seen[0]["authorization"] == f"Bearer {TOKEN}"
    assert result.data["headers"]["x-echo-auth"] == "Bearer ***"


def test_the_tools_own_header_wins_over_auth(server: _Server) -> None:
    call = _call(url=_url(server), auth="api", headers={"authorization": "Bearer mine-0000"})
    result = _run(call, {"api": {"type": "bearer", "token": TOKEN}})
    assert result.ok, result.error
    assert server.seen[0]["authorization"] == "Bearer mine-0000"


@pytest.mark.parametrize(
    ("credentials", "message"),
    [
        (
            {"api": {"type": "postgres", "host": "h", "password": "p"}},
            r"credential 'api' has type 'postgres'; http accepts the types bearer, basic, "
            r"api_key, header",
        ),
        ({}, r"credential 'api' is not registered"),
        ({"api": {"type": "bearer"}}, r"credential 'api' of type 'bearer' needs the field 'token'"),
        (
            {"api": {"type": "api_key", "value": "v"}},
            r"credential 'api' of type 'api_key' needs the field 'key' or 'header'",
        ),
    ],
    ids=["unknown-type", "not-registered", "no-token", "no-key"],
)
def test_an_unusable_credential_is_an_invalid_call_naming_it(
    server: _Server, credentials: dict[str, Any], message: str
) -> None:
    result = _run(_call(url=_url(server), auth="api"), credentials)
    assert result.error is not None
    assert result.error.kind == "invalid"
    assert result.error.message.startswith("http auth: ")
    assert message in result.error.message
    assert server.seen == []


# --------------------------------------------------------------------------- verify_ssl


def _self_signed(directory: Path) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Recorder)
    server.socket = _self_signed(tmp_path).wrap_socket(server.socket, server_side=True)
    yield from _serve(server)


@pytest.mark.parametrize("flag", [False, "false"])
def test_verify_ssl_false_accepts_a_self_signed_certificate(tls_server: _Server, flag: Any) -> None:
    result = _run(_call(url=_url(tls_server, "https"), verify_ssl=flag))
    assert result.ok, result.error
    assert result.data["status_code"] == 200


def test_by_default_an_untrusted_certificate_fails_the_call_and_says_why(
    tls_server: _Server,
) -> None:
    url = _url(tls_server, "https")
    result = _run(_call(url=url))
    assert result.error is not None
    error = result.error
    assert (error.kind, error.code, error.retryable) == (
        "connection",
        "CERTIFICATE_VERIFY_FAILED",
        False,
    )
    assert f"TLS certificate of GET {url} could not be verified" in error.message
    assert "verify_ssl: false" in error.message
    assert tls_server.seen == []


# --------------------------------------------------------------------------- events


def test_a_bearer_token_never_reaches_the_stored_events(server: _Server, tmp_path: Path) -> None:
    text = f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: http_auth_events}}
workflow:
  - step: start
    tool: {{kind: http, url: "{_url(server)}", auth: api}}
    next: {{arcs: [{{step: show}}]}}
  - step: show
    tool:
      kind: python
      input: {{sent: "{{{{ start.data.headers.authorization }}}}"}}
      code: 'result = {{"sent": sent}}'
"""
    store = SQLiteStore(tmp_path / "engine.db")

    async def main() -> Any:
        vault = Vault(store, new_key())
        async with EmbeddedEngine(store, machine_id=1, python_workers=1, vault=vault) as engine:
            engine.register_credential("api", "bearer", {"token": TOKEN})
            return await engine.run(load.load_text(text), text, timeout=60)

    try:
        state = asyncio.run(main())
        assert state.status == "COMPLETED", state.error
        assert server.seen[0]["authorization"] == f"Bearer {TOKEN}"
        events = store.load(state.execution_id)
        assert events
        assert TOKEN not in repr([e for e in events])
        assert state.results["show"] == {"sent": "Bearer ***"}
    finally:
        store.close()
