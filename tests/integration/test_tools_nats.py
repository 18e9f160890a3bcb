"""The nats tool (DSL 12.1) against a real NATS server with JetStream.

`MILEPOST_TEST_NATS_URL` (default `nats://127.0.0.1:4222`) names the server. Every test
works on buckets and streams of its own, deleted afterwards. Without a reachable server
the tests are skipped, except under CI (`CI=true`), where that is a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import uuid
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any

import nats
import pytest
from nats.js.errors import NotFoundError

from milepost.tools import base
from milepost.tools.runtime import ToolRuntime
from tests.shared import require_nats

Lookup = Callable[[str], Mapping[str, Any] | None]


@pytest.fixture(scope="module")
def nats_url() -> str:
    return require_nats()


def _sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """The async test run to its end on a loop of its own."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


@pytest.fixture
def bucket(nats_url: str) -> Iterator[str]:
    """A bucket name of this test; its KV bucket, object store and stream are deleted."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    asyncio.run(_drop(nats_url, name))


async def _drop(nats_url: str, name: str) -> None:
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    for drop in (js.delete_key_value, js.delete_object_store, lambda n: js.delete_stream(f"S_{n}")):
        with contextlib.suppress(NotFoundError):
            await drop(name)
    await nc.close()


def _call(config: dict[str, Any], **fields: Any) -> base.ToolCall:
    return base.ToolCall("nats", config, {}, {}, "idem", **{"timeout": 10.0, **fields})


async def _run(
    url: str | None, credentials: Lookup | None = None, /, **config: Any
) -> base.ToolResult:
    async with ToolRuntime(1, nats_url=url, credentials=credentials) as runtime:
        return await runtime.run(_call(config))


@_sync
async def test_kv_put_creates_the_bucket_and_json_values_round_trip(
    nats_url: str, bucket: str
) -> None:
    value = {"name": "Ada", "roles": ["admin"], "n": 1.5, "ok": True, "none": None}
    put = await _run(nats_url, operation="kv_put", bucket=bucket, key="user-1", value=value)
    assert put.ok, put.error
    assert put.data == {"bucket": bucket, "key": "user-1", "revision": 1, "created_bucket": True}
    got = await _run(nats_url, operation="kv_get", bucket=bucket, key="user-1")
    assert got.data == {
        "found": True,
        "bucket": bucket,
        "key": "user-1",
        "value": value,
        "revision": 1,
    }
    listed = [1, {"a": [2]}]
    await _run(nats_url, operation="kv_put", bucket=bucket, key="list", value=listed)
    again = await _run(nats_url, operation="kv_put", bucket=bucket, key="s", value="plain text")
    assert again.data["created_bucket"] is False
    assert (await _run(nats_url, operation="kv_get", bucket=bucket, key="list")).data[
        "value"
    ] == listed
    assert (await _run(nats_url, operation="kv_get", bucket=bucket, key="s")).data[
        "value"
    ] == "plain text"


@_sync
async def test_a_missing_key_or_bucket_is_found_false(nats_url: str, bucket: str) -> None:
    absent = await _run(nats_url, operation="kv_get", bucket=bucket, key="k")
    assert absent.ok and absent.data == {
        "found": False,
        "bucket": bucket,
        "key": "k",
        "value": None,
    }
    for operation in ("kv_delete", "kv_purge"):
        assert (await _run(nats_url, operation=operation, bucket=bucket, key="k")).data[
            "found"
        ] is False
    keys = await _run(nats_url, operation="kv_keys", bucket=bucket)
    assert keys.data == {"found": False, "bucket": bucket, "keys": [], "count": 0}
    await _run(nats_url, operation="kv_put", bucket=bucket, key="other", value=1)
    missing = await _run(nats_url, operation="kv_get", bucket=bucket, key="k")
    assert missing.ok and missing.data["found"] is False


@_sync
async def test_kv_keys_delete_and_purge(nats_url: str, bucket: str) -> None:
    for key in ("b.2", "a.1", "c"):
        await _run(nats_url, operation="kv_put", bucket=bucket, key=key, value=key)
    keys = await _run(nats_url, operation="kv_keys", bucket=bucket)
    assert keys.data == {"found": True, "bucket": bucket, "keys": ["a.1", "b.2", "c"], "count": 3}
    some = await _run(nats_url, operation="kv_keys", bucket=bucket, pattern="*.*")
    assert some.data["keys"] == ["a.1", "b.2"]
    deleted = await _run(nats_url, operation="kv_delete", bucket=bucket, key="a.1")
    assert deleted.data == {"found": True, "bucket": bucket, "key": "a.1"}
    assert (await _run(nats_url, operation="kv_purge", bucket=bucket, key="c")).ok
    gone = await _run(nats_url, operation="kv_get", bucket=bucket, key="a.1")
    assert gone.data["found"] is False
    assert (await _run(nats_url, operation="kv_keys", bucket=bucket)).data["keys"] == ["b.2"]


@_sync
async def test_kv_put_ttl_needs_a_server_with_per_key_ttls(nats_url: str, bucket: str) -> None:
    put = await _run(nats_url, operation="kv_put", bucket=bucket, key="k", value=1, ttl="1h")
    nc = await nats.connect(nats_url)
    version = nc.connected_server_version
    await nc.close()
    if (version.major, version.minor) < (2, 11):
        assert put.error is not None and put.error.kind == "invalid"
        assert put.error.code == "unsupported" and "2.11" in put.error.message
    else:
        assert put.ok, put.error
    bad = await _run(nats_url, operation="kv_put", bucket=bucket, key="k", value=1, ttl="soon")
    assert bad.error is not None and bad.error.kind == "invalid" and "ttl" in bad.error.message


@_sync
async def test_object_operations(nats_url: str, bucket: str) -> None:
    data = {"rows": [1, 2, 3]}
    put = await _run(
        nats_url,
        operation="object_put",
        bucket=bucket,
        name="r.json",
        data=data,
        description="a report",
    )
    assert put.ok, put.error
    assert put.data["created_bucket"] is True and put.data["size"] > 0
    await _run(nats_url, operation="object_put", bucket=bucket, name="t.txt", data="[not json")
    got = await _run(nats_url, operation="object_get", bucket=bucket, name="r.json")
    assert got.data["found"] is True and got.data["data"] == data
    # a stored string stays a string, even one that looks like JSON
    await _run(nats_url, operation="object_put", bucket=bucket, name="s", data='{"a": 1}')
    text = await _run(nats_url, operation="object_get", bucket=bucket, name="s")
    assert text.data["data"] == '{"a": 1}'
    raw = await _run(
        nats_url, operation="object_put", bucket=bucket, name="b", data="AAH/", encoding="base64"
    )
    assert raw.data["size"] == 3
    binary = await _run(nats_url, operation="object_get", bucket=bucket, name="b")
    assert binary.data["data"] == "AAH/" and binary.data["encoding"] == "base64"
    info = await _run(nats_url, operation="object_info", bucket=bucket, name="r.json")
    assert info.data["found"] is True and info.data["description"] == "a report"
    listed = await _run(nats_url, operation="object_list", bucket=bucket)
    assert [o["name"] for o in listed.data["objects"]] == ["b", "r.json", "s", "t.txt"]
    deleted = await _run(nats_url, operation="object_delete", bucket=bucket, name="r.json")
    assert deleted.data == {"found": True, "bucket": bucket, "name": "r.json"}
    for operation in ("object_get", "object_info", "object_delete"):
        absent = await _run(nats_url, operation=operation, bucket=bucket, name="r.json")
        assert absent.ok and absent.data["found"] is False, operation
    assert (await _run(nats_url, operation="object_list", bucket=bucket)).data["count"] == 3


@_sync
async def test_object_reads_of_a_missing_store_are_found_false(nats_url: str, bucket: str) -> None:
    listed = await _run(nats_url, operation="object_list", bucket=bucket)
    assert listed.data == {"found": False, "bucket": bucket, "objects": [], "count": 0}
    got = await _run(nats_url, operation="object_get", bucket=bucket, name="x")
    assert got.data["found"] is False


@_sync
async def test_stream_publish_get_and_info(nats_url: str, bucket: str) -> None:
    nc = await nats.connect(nats_url)
    await nc.jetstream().add_stream(name=f"S_{bucket}", subjects=[f"{bucket}.>"])
    await nc.close()
    stream = f"S_{bucket}"
    async with ToolRuntime(1, nats_url=nats_url) as runtime:
        config = {
            "operation": "js_publish",
            "subject": f"{bucket}.evt",
            "data": {"kind": "test"},
            "headers": {"X-Source": "milepost"},
        }
        first = await runtime.run(_call(config, operation_key="op-1"))
        assert first.data == {
            "stream": stream,
            "seq": 1,
            "subject": f"{bucket}.evt",
            "duplicate": False,
        }
        # a retried attempt (same operation key) is stored once
        retry = await runtime.run(_call(config, operation_key="op-1"))
        assert retry.data["seq"] == 1 and retry.data["duplicate"] is True
        other = await runtime.run(_call({**config, "data": "text"}, operation_key="op-2"))
        assert other.data["seq"] == 2
        msg = await runtime.run(_call({"operation": "js_get_msg", "stream": stream, "seq": "1"}))
        assert msg.data["found"] is True and msg.data["data"] == {"kind": "test"}
        assert msg.data["headers"]["X-Source"] == "milepost"
        assert msg.data["headers"]["Nats-Msg-Id"] == "op-1"
        absent = await runtime.run(_call({"operation": "js_get_msg", "stream": stream, "seq": 9}))
        assert absent.ok and absent.data["found"] is False
        info = await runtime.run(_call({"operation": "js_stream_info", "stream": stream}))
        assert info.data["config"]["subjects"] == [f"{bucket}.>"]
        assert info.data["state"]["messages"] == 2 and info.data["state"]["last_seq"] == 2
        none = await runtime.run(_call({"operation": "js_stream_info", "stream": f"X_{bucket}"}))
        assert none.ok and none.data == {"found": False, "stream": f"X_{bucket}"}
        lost = await runtime.run(_call({"operation": "js_publish", "subject": f"no.{bucket}"}))
        assert lost.error is not None and lost.error.kind == "not_found"


@_sync
async def test_a_closed_port_is_a_retryable_connection_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = await _run(f"nats://127.0.0.1:{port}", operation="kv_get", bucket="b", key="k")
    assert result.error is not None
    assert result.error.kind == "connection" and result.error.retryable
    assert f"127.0.0.1:{port}" in result.error.message


@_sync
async def test_auth_names_a_credential_with_the_url(nats_url: str, bucket: str) -> None:
    creds = {
        "natsy": {"type": "nats", "url": nats_url},
        "pg": {"type": "postgres", "host": "h"},
        "secret": {
            "type": "nats",
            "url": "nats://127.0.0.1:1",
            "user": "u",
            "password": "hunter2-nats",
        },
    }
    # no default URL: only the credential can say where to connect
    put = await _run(
        None, creds.get, auth="natsy", operation="kv_put", bucket=bucket, key="k", value="v"
    )
    assert put.ok, put.error
    for auth, kind, text in [
        ("pg", "invalid", "not nats"),
        ("nope", "invalid", "not registered"),
        ("secret", "connection", "127.0.0.1:1"),
    ]:
        failed = await _run(None, creds.get, auth=auth, operation="kv_get", bucket=bucket, key="k")
        assert failed.error is not None and failed.error.kind == kind, auth
        assert text in failed.error.message and "hunter2" not in failed.error.message


@_sync
async def test_without_auth_or_a_url_the_call_is_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MILEPOST_NATS_URL", raising=False)
    result = await _run(None, operation="kv_get", bucket="b", key="k")
    assert result.error is not None and result.error.kind == "invalid"
    assert "MILEPOST_NATS_URL" in result.error.message


@_sync
async def test_run_time_checks_of_rendered_fields(nats_url: str) -> None:
    cases = [
        ({"operation": "kv_fetch", "bucket": "b"}, "unknown nats operation 'kv_fetch'"),
        ({"operation": "kv_get", "bucket": "b"}, "field 'key' is required"),
        ({"operation": "kv_get", "bucket": "b c", "key": "k"}, "bucket"),
        ({"operation": "kv_get", "bucket": "b", "key": "a b"}, "not a valid key"),
    ]
    for config, text in cases:
        result = await _run(nats_url, **config)
        assert result.error is not None and result.error.kind == "invalid", config
        assert text in result.error.message, result.error.message


@_sync
async def test_a_timeout_is_retryable_and_closes_the_call(nats_url: str, bucket: str) -> None:
    async with ToolRuntime(1, nats_url=nats_url) as runtime:
        config = {"operation": "kv_put", "bucket": bucket, "key": "k", "value": 1}
        result = await runtime.run(_call(config, timeout=0.000001))
        assert result.error is not None and result.error.kind == "timeout"
        assert result.error.retryable
        # a cancelled call propagates its cancellation
        task = asyncio.create_task(runtime.run(_call(config)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
