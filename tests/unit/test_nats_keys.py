"""`kv_keys` reads a bucket's keys up to the end its stream had when asked, not up to
nats-py's "nothing pending" marker, which can come before entries on their way."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from nats.js.errors import NoKeysError

from milepost.tools.nats_tool.operations import Context, kv_keys


@dataclass
class Entry:
    key: str
    revision: int
    operation: str | None = None
    delta: int | None = 1
    """Entries pending after this one when it was delivered (None: not said)."""


class Watcher:
    def __init__(self, updates: list[Entry | None]) -> None:
        self._updates = list(updates)
        self.stopped = False

    async def updates(self, timeout: float = 5.0) -> Entry | None:
        if not self._updates:
            raise TimeoutError("no more entries")  # nats-py's timeout is a TimeoutError
        return self._updates.pop(0)

    async def stop(self) -> None:
        self.stopped = True


class Bucket:
    """A KeyValue whose watcher sends its marker first, as nats-py's can when the entries
    are still on their way when it checks (nats.py #842)."""

    def __init__(self, updates: list[Entry | None]) -> None:
        self.watcher = Watcher(updates)

    async def watchall(self, **_: Any) -> Watcher:
        return self.watcher

    async def keys(self) -> list[str]:  # nats-py's: up to the first marker
        keys = []
        while (entry := await self.watcher.updates()) is not None:
            keys.append(entry.key)
        if not keys:
            raise NoKeysError
        return keys


class JetStream:
    def __init__(self, bucket: Bucket, messages: int, last_seq: int) -> None:
        self.bucket = bucket
        self.state = SimpleNamespace(messages=messages, last_seq=last_seq)

    async def key_value(self, name: str) -> Bucket:
        return self.bucket

    async def stream_info(self, name: str) -> Any:
        assert name == "KV_b"
        return SimpleNamespace(state=self.state)


def keys_of(js: JetStream) -> dict[str, Any]:
    return asyncio.run(kv_keys(js, {"bucket": "b"}, Context("", (2, 10))))  # type: ignore[arg-type]


def test_keys_that_come_after_an_early_marker_are_listed() -> None:
    bucket = Bucket([None, Entry("b.2", 4), Entry("gone", 5, "DEL"), Entry("a.1", 6)])
    got = keys_of(JetStream(bucket, messages=3, last_seq=6))
    assert got == {"found": True, "bucket": "b", "keys": ["a.1", "b.2"], "count": 2}
    assert bucket.watcher.stopped


def test_an_empty_bucket_is_read_without_a_watcher() -> None:
    bucket = Bucket([])
    assert keys_of(JetStream(bucket, messages=0, last_seq=9))["keys"] == []
    assert not bucket.watcher.stopped


def test_the_entry_nothing_is_pending_after_ends_the_listing() -> None:
    # the stream's last message expired (a key's TTL) after it was asked for its end: the
    # last entry delivered says nothing follows it, and the listing ends there
    bucket = Bucket([Entry("a", 2), Entry("b", 3, delta=0), Entry("late", 9)])
    assert keys_of(JetStream(bucket, messages=3, last_seq=8))["keys"] == ["a", "b"]


def test_a_key_deleted_or_purged_last_is_not_listed() -> None:
    bucket = Bucket([Entry("a", 2, "PURGE"), Entry("b", 3), Entry("c", 7, "DEL")])
    assert keys_of(JetStream(bucket, messages=3, last_seq=7))["keys"] == ["b"]
