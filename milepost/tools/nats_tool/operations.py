"""The operations of the nats tool: each takes the JetStream context and the call's fields
and returns the step's result (a JSON mapping). Nothing here subscribes: `kv_keys` and
`object_list` read a bucket's current entries through a watcher stopped once it has
delivered them."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Awaitable, Callable
from typing import Any

from nats.js import api
from nats.js.client import JetStreamContext
from nats.js.errors import (
    APIError,
    BucketNotFoundError,
    KeyNotFoundError,
    NotFoundError,
    ObjectNotFoundError,
)
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from milepost.playbook.durations import parse_duration
from milepost.tools.nats_tool.values import JSON_TYPE, decode, encode, text_headers

Config = dict[str, Any]
Operation = Callable[[JetStreamContext, Config, "Context"], Awaitable[dict[str, Any]]]
STREAM_EXISTS = 10058
"""JetStream: a stream of that name exists (with another configuration): a racing put
created the bucket first."""
_KEY_RE = re.compile(r"[-/_=.a-zA-Z0-9]+")
_BUCKET_RE = re.compile(r"[-_a-zA-Z0-9]+")
JS_TIMEOUT = 10.0
"""Seconds a JetStream request may wait for its answer (the call's timeout bounds it)."""
MSG_TTL_VERSION = (2, 11)
"""The first NATS server release with per-message TTLs (`Nats-TTL`)."""


class Context:
    """What an operation knows of its call beside the fields."""

    def __init__(self, operation_key: str, server_version: tuple[int, int]) -> None:
        self.operation_key = operation_key
        self.server_version = server_version


def _text(config: Config, name: str) -> str:
    value = config.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise ValueError(f"nats `{name}` must be a non-empty string, got {value!r}")
    return value


def _key(config: Config) -> str:
    key = _text(config, "key")
    if not _KEY_RE.fullmatch(key) or key.startswith(".") or key.endswith("."):
        raise ValueError(
            f"nats `key` {key!r} is not a valid key (letters, digits and "
            "- / _ = . only, not starting or ending with a dot)"
        )
    return key


def _bucket(config: Config) -> str:
    bucket = _text(config, "bucket")
    if not _BUCKET_RE.fullmatch(bucket):
        raise ValueError(
            f"nats `bucket` {bucket!r} is not a valid bucket name (letters, digits, - and _ only)"
        )
    return bucket


def _missing(**fields: Any) -> dict[str, Any]:
    return {"found": False, **fields}


# --------------------------------------------------------------------------- key/value


async def _kv(js: JetStreamContext, bucket: str, *, create: bool = False) -> KeyValue | None:
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        if not create:
            return None
    try:
        return await js.create_key_value(bucket=bucket)
    except APIError as exc:
        if exc.err_code != STREAM_EXISTS:
            raise
        return await js.key_value(bucket)


async def kv_get(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    bucket, key = _bucket(config), _key(config)
    kv = await _kv(js, bucket)
    if kv is None:
        return _missing(bucket=bucket, key=key, value=None)
    try:
        entry = await kv.get(key)
    except KeyNotFoundError:
        return _missing(bucket=bucket, key=key, value=None)
    value, encoding = decode(entry.value)
    out = {"found": True, "bucket": bucket, "key": key, "value": value, "revision": entry.revision}
    if encoding:
        out["encoding"] = encoding
    return out


async def kv_put(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    bucket, key = _bucket(config), _key(config)
    data, _ = encode(config.get("value"))
    ttl = _ttl(config.get("ttl"), ctx)
    existed = await _kv(js, bucket) is not None
    if not existed:
        await _kv(js, bucket, create=True)
    # the kv client's put takes no TTL: publish on the key's subject, as it does
    ack = await js.publish(f"$KV.{bucket}.{key}", data, msg_ttl=ttl)
    return {"bucket": bucket, "key": key, "revision": ack.seq, "created_bucket": not existed}


def _ttl(raw: Any, ctx: Context) -> float | None:
    if raw is None or raw == "":
        return None
    seconds = parse_duration(raw, "nats `ttl`")
    if seconds < 1:
        raise ValueError(f"nats `ttl` must be at least 1s, got {raw!r}")
    if ctx.server_version < MSG_TTL_VERSION:
        found = ".".join(map(str, ctx.server_version))
        raise Unsupported(
            f"nats `ttl` needs a NATS server 2.11 or later (per-key TTL); this server is {found}"
        )
    return seconds


class Unsupported(ValueError):
    """The server cannot do what the call asks (error kind `invalid`, code
    `unsupported`)."""


async def _kv_remove(js: JetStreamContext, config: Config, purge: bool) -> dict[str, Any]:
    bucket, key = _bucket(config), _key(config)
    kv = await _kv(js, bucket)
    if kv is None:
        return _missing(bucket=bucket, key=key)
    if purge:
        await kv.purge(key)
    else:
        await kv.delete(key)
    return {"found": True, "bucket": bucket, "key": key}


async def kv_delete(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    return await _kv_remove(js, config, purge=False)


async def kv_purge(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    return await _kv_remove(js, config, purge=True)


async def kv_keys(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    bucket = _bucket(config)
    pattern = config.get("pattern")
    kv = await _kv(js, bucket)
    if kv is None:
        return _missing(bucket=bucket, keys=[], count=0)
    keys = await live_keys(js, kv, bucket)
    if pattern:
        keys = [k for k in keys if fnmatch.fnmatchcase(k, str(pattern))]
    return {"found": True, "bucket": bucket, "keys": keys, "count": len(keys)}


async def live_keys(js: JetStreamContext, kv: KeyValue, bucket: str) -> list[str]:
    """The bucket's keys that hold a value, in order, as of the bucket's last entry now.

    Not nats-py's `KeyValue.keys()`: it stops at the watcher's first "nothing pending"
    marker, which can come before entries already on their way (nats.py #842), so under
    load it listed some keys or none. This watches the last entry of every key, deletes and
    purges included, until an entry says nothing is pending after it (`delta`, from that
    entry's own delivery) or it reaches the sequence the bucket's stream ended at when
    asked; each entry comes within JetStream's request timeout or the call fails as a
    timeout."""
    state = (await js.stream_info(f"KV_{bucket}")).state
    if not state.messages:
        return []
    watcher = await kv.watchall(meta_only=True)
    live: set[str] = set()
    try:
        while True:
            entry = await watcher.updates(timeout=JS_TIMEOUT)  # type: ignore[no-untyped-call]
            if entry is None:  # the marker: not to be trusted, the stream's end is
                continue
            if entry.operation is None:
                live.add(entry.key)
            else:  # a delete or a purge: the key holds no value
                live.discard(entry.key)
            if entry.delta == 0 or (entry.revision or 0) >= state.last_seq:
                return sorted(live)
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]


# --------------------------------------------------------------------------- objects


async def _store(js: JetStreamContext, bucket: str, *, create: bool = False) -> ObjectStore | None:
    try:
        return await js.object_store(bucket)
    except BucketNotFoundError:
        if not create:
            return None
    try:
        return await js.create_object_store(bucket)
    except APIError as exc:
        if exc.err_code != STREAM_EXISTS:
            raise
        return await js.object_store(bucket)


def _info(info: api.ObjectInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "size": info.size,
        "mtime": info.mtime or None,
        "digest": info.digest or None,
        "chunks": info.chunks,
        "description": info.description,
        "headers": dict(info.headers or {}),
    }


async def object_put(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    bucket, name = _bucket(config), _text(config, "name")
    data, is_json = encode(config.get("data"), config.get("encoding"))
    existed = await _store(js, bucket) is not None
    store = await _store(js, bucket, create=True) if not existed else await _store(js, bucket)
    assert store is not None
    description = config.get("description")
    # the header tells a read to parse the object back (a stored string stays a string)
    meta = api.ObjectMeta(
        name=name,
        description=str(description) if description else None,
        headers={"Content-Type": JSON_TYPE if is_json else "text/plain"},
    )
    info = await store.put(name, data, meta=meta)
    return {
        "bucket": bucket,
        "name": name,
        "size": info.size,
        "digest": info.digest,
        "created_bucket": not existed,
    }


async def object_get(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    bucket, name = _bucket(config), _text(config, "name")
    store = await _store(js, bucket)
    if store is None:
        return _missing(bucket=bucket, name=name, data=None)
    try:
        result = await store.get(name)
    except ObjectNotFoundError:
        return _missing(bucket=bucket, name=name, data=None)
    headers = result.info.headers or {}
    kind = next((str(v) for k, v in headers.items() if k.lower() == "content-type"), None)
    data, encoding = decode(
        result.data,
        is_json=None if kind is None else kind == JSON_TYPE,
        encoding=config.get("encoding"),
    )
    out = {
        "found": True,
        "bucket": bucket,
        "name": name,
        "data": data,
        "size": result.info.size,
        "digest": result.info.digest,
    }
    if encoding:
        out["encoding"] = encoding
    return out


async def object_info(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    bucket, name = _bucket(config), _text(config, "name")
    store = await _store(js, bucket)
    if store is None:
        return _missing(bucket=bucket, name=name)
    try:
        # `get_info`, not `info`: the latter fails on a missing object (nats-py 2.16)
        info = await store.get_info(name)
    except ObjectNotFoundError:
        return _missing(bucket=bucket, name=name)
    return {"found": True, "bucket": bucket, **_info(info)}


async def object_delete(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    bucket, name = _bucket(config), _text(config, "name")
    store = await _store(js, bucket)
    if store is None:
        return _missing(bucket=bucket, name=name)
    try:
        await store.delete(name)
    except ObjectNotFoundError:
        return _missing(bucket=bucket, name=name)
    return {"found": True, "bucket": bucket, "name": name}


async def object_list(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    bucket = _bucket(config)
    store = await _store(js, bucket)
    if store is None:
        return _missing(bucket=bucket, objects=[], count=0)
    try:
        infos = await store.list(ignore_deletes=True)
    except NotFoundError:  # nats-py's answer for an empty store
        infos = []
    objects = sorted((_info(i) for i in infos if not i.deleted), key=lambda o: o["name"])
    return {"found": True, "bucket": bucket, "objects": objects, "count": len(objects)}


# --------------------------------------------------------------------------- streams


async def js_publish(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    subject = _text(config, "subject")
    payload = b"" if config.get("data") is None else encode(config["data"])[0]
    headers = text_headers(config.get("headers"))
    # a retried attempt publishes under the same id: JetStream keeps one copy within the
    # stream's duplicate window (DSL 10.4, as http's Idempotency-Key)
    if ctx.operation_key and not any(k.lower() == "nats-msg-id" for k in headers):
        headers["Nats-Msg-Id"] = ctx.operation_key
    stream = config.get("stream")
    ack = await js.publish(
        subject, payload, headers=headers or None, stream=str(stream) if stream else None
    )
    return {
        "stream": ack.stream,
        "seq": ack.seq,
        "subject": subject,
        "duplicate": bool(ack.duplicate),
    }


async def js_get_msg(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    stream = _text(config, "stream")
    try:
        seq = int(str(config.get("seq")).strip())
    except ValueError:
        raise ValueError(f"nats `seq` must be a number, got {config.get('seq')!r}") from None
    if seq < 1:
        raise ValueError(f"nats `seq` must be 1 or more, got {seq}")
    try:
        msg = await js.get_msg(stream, seq=seq)
    except NotFoundError:  # no such stream, or no message at that sequence
        return _missing(stream=stream, seq=seq, data=None)
    data, encoding = decode(msg.data)
    out = {
        "found": True,
        "stream": stream,
        "seq": msg.seq,
        "subject": msg.subject,
        "data": data,
        "headers": dict(msg.headers or {}),
        "time": msg.time.isoformat() if msg.time else None,
    }
    if encoding:
        out["encoding"] = encoding
    return out


async def js_stream_info(js: JetStreamContext, config: Config, ctx: Context) -> dict[str, Any]:
    stream = _text(config, "stream")
    try:
        info = await js.stream_info(stream)
    except NotFoundError:
        return _missing(stream=stream)
    cfg, state = info.config, info.state
    return {
        "found": True,
        "stream": stream,
        "config": {
            "name": cfg.name,
            "subjects": list(cfg.subjects or []),
            "retention": _name(cfg.retention),
            "storage": _name(cfg.storage),
            "max_msgs": cfg.max_msgs,
            "max_bytes": cfg.max_bytes,
            "max_age": cfg.max_age,
        },
        "state": {
            "messages": state.messages,
            "bytes": state.bytes,
            "first_seq": state.first_seq,
            "last_seq": state.last_seq,
            "consumer_count": state.consumer_count,
        },
    }


def _name(value: Any) -> str | None:
    """An enum of nats-py as its wire name (`limits`, `file`)."""
    return None if value is None else str(getattr(value, "value", value))


OPERATIONS: dict[str, Operation] = {
    "kv_get": kv_get,
    "kv_put": kv_put,
    "kv_delete": kv_delete,
    "kv_keys": kv_keys,
    "kv_purge": kv_purge,
    "object_get": object_get,
    "object_put": object_put,
    "object_delete": object_delete,
    "object_list": object_list,
    "object_info": object_info,
    "js_publish": js_publish,
    "js_get_msg": js_get_msg,
    "js_stream_info": js_stream_info,
}
