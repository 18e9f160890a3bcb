"""The store contract: one suite for every adapter (SQLite now; PostgreSQL joins the list)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.errors import ClaimRefused, MilepostError
from milepost.store import port
from milepost.store.sqlite import SQLiteStore

StoreFactory = Callable[[], Any]


@pytest.fixture(params=["sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory of stores on ONE database (several instances = several processes)."""
    opened: list[Any] = []

    def factory() -> Any:
        store = SQLiteStore(tmp_path / "contract.db")
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store: StoreFactory) -> Any:
    return make_store()


_ids = itertools.count(1_000)


def event(xid: int, etype: str, step: str | None = None, **payload: Any) -> ev.Event:
    return ev.new_event(next(_ids), xid, etype, 100.0 + next(_ids) / 1000, step=step,
                        payload=payload)  # fmt: skip


def started(xid: int, path: str = "p") -> ev.Event:
    return event(xid, ev.EXECUTION_STARTED, path=path, version=1, workload={"a": 1})


def issued(xid: int, command_id: int, step: str = "s") -> ev.Event:
    return event(xid, ev.COMMAND_ISSUED, step, command_id=command_id, run=1, index=-1, attempt=1,
                 idempotency_key="k" * 64)  # fmt: skip


def test_migrate_is_idempotent_and_reports_the_version(make_store: StoreFactory) -> None:
    first = make_store()
    assert first.migrate() == first.migrate() >= 1
    assert make_store().migrate() == first.migrate()  # a second process finds it migrated


def test_append_numbers_events_per_execution_and_load_reads_after_a_watermark(store: Any) -> None:
    a = store.append([started(1), issued(1, 11), started(2)])
    b = store.append([event(1, ev.STEP_ENTER, "s", run=1), event(2, ev.STEP_ENTER, "s", run=1)])
    assert [(e.execution_id, e.seq) for e in a + b] == [(1, 1), (1, 2), (2, 1), (1, 3), (2, 2)]
    loaded = store.load(1)
    assert [e.event_id for e in loaded] == [a[0].event_id, a[1].event_id, b[0].event_id]
    assert loaded[1].payload["command_id"] == 11 and loaded[1].step == "s"
    assert [e.seq for e in store.load(1, after_seq=2)] == [3]
    assert store.event_count(1) == 3


def test_an_event_id_already_in_the_log_is_accepted_and_not_stored_twice(store: Any) -> None:
    first = started(5)
    store.append([first])
    again = store.append([first, event(5, ev.STEP_ENTER, "s", run=1)])
    assert [e.event_type for e in again] == [ev.STEP_ENTER]
    assert [e.event_type for e in store.load(5)] == [ev.EXECUTION_STARTED, ev.STEP_ENTER]


def test_payload_round_trips_and_large_ones_go_to_the_result_store(store: Any) -> None:
    big = {"rows": ["x" * 1000] * 400}  # well over the inline threshold
    store.append([started(6), event(6, ev.STEP_EXIT, "s", run=1, result=big, ctx={"k": [1, 2]})])
    loaded = store.load(6)[1]
    assert loaded.payload["result"] == big and loaded.payload["ctx"] == {"k": [1, 2]}
    # every adapter keeps `_query(sql, params)` for tests like this one
    assert store._query("SELECT count(*) FROM result_blob", ())[0][0] == 1
    uri = store.put_blob(6, b"abc", 1.0)
    assert uri.startswith("milepost://results/") and store.get_blob(uri) == b"abc"
    with pytest.raises(MilepostError):
        store.get_blob("milepost://results/999999")


def test_execution_projection_follows_the_log(store: Any) -> None:
    store.append([started(7, path="demo")])
    row = store.get_execution(7)
    assert (row.path, row.status, row.version) == ("demo", "RUNNING", 1)
    store.append([event(7, ev.EXECUTION_FAILED, error={"message": "boom", "step": "s"})])
    row = store.get_execution(7)
    assert row.status == "FAILED" and row.error == {"message": "boom", "step": "s"}
    store.append([started(8, path="other")])
    assert [r.execution_id for r in store.list_executions()] == [8, 7]
    assert [r.execution_id for r in store.list_executions(status="failed")] == [7]
    assert [r.execution_id for r in store.list_executions(path="other")] == [8]
    assert store.get_execution(999) is None


def test_command_projection_is_the_claim_queue(store: Any) -> None:
    store.append([started(9), issued(9, 91), issued(9, 92)])
    assert [c.command_id for c in store.open_commands(9)] == [91, 92]
    store.append([event(9, ev.COMMAND_COMPLETED, "s", command_id=91, result=1)])
    assert [c.command_id for c in store.open_commands(9)] == [92]
    assert store.get_command(91).status == port.COMMAND_COMPLETED
    store.append([event(9, ev.EXECUTION_CANCELLED)])
    assert store.open_commands(9) == []
    assert store.get_command(92).status == port.COMMAND_CANCELLED


def test_claim_gives_one_live_lease_per_command(store: Any) -> None:
    store.append([started(10), issued(10, 101)])
    lease = store.claim(101, "w1", now=50.0, lease_s=10.0)
    assert (lease.epoch, lease.expires_at) == (1, 60.0)
    assert store.claim(101, "w1", now=51.0, lease_s=10.0).epoch == 1  # repeat by the holder
    with pytest.raises(ClaimRefused) as refused:
        store.claim(101, "w2", now=52.0, lease_s=10.0)
    assert refused.value.fields["reason"] == "active_claim"
    renewed = store.heartbeat(101, "w1", 1, now=55.0, lease_s=10.0)
    assert renewed.expires_at == 65.0
    with pytest.raises(ClaimRefused):
        store.heartbeat(101, "w1", 2, now=55.0, lease_s=10.0)  # a stale epoch
    assert store.expired_claims(now=64.0) == []
    assert [c.command_id for c in store.expired_claims(now=66.0)] == [101]
    store.append([event(10, ev.COMMAND_COMPLETED, "s", command_id=101, result=None)])
    with pytest.raises(ClaimRefused) as done:
        store.claim(101, "w1", now=70.0, lease_s=10.0)
    assert done.value.fields["reason"] == "already_terminal"
    with pytest.raises(MilepostError):
        store.claim(404, "w1", now=70.0, lease_s=10.0)


def test_snapshots_keep_only_the_newest(store: Any) -> None:
    assert store.load_snapshot(11) is None
    store.save_snapshot(11, 10, b"ten")
    store.save_snapshot(11, 5, b"five")  # older: ignored
    assert store.load_snapshot(11) == (10, b"ten")
    store.save_snapshot(11, 20, b"twenty")
    assert store.load_snapshot(11) == (20, b"twenty")


def test_catalog_versions_change_only_when_the_content_does(store: Any) -> None:
    one = store.register_playbook("a/b", "v1 text", 1.0)
    same = store.register_playbook("a/b", "v1 text", 2.0)
    two = store.register_playbook("a/b", "v2 text", 3.0)
    assert (one.version, same.version, two.version) == (1, 1, 2)
    assert store.get_playbook("a/b").content == "v2 text"
    assert store.get_playbook("a/b", 1).content == "v1 text"
    assert store.get_playbook("a/b", 3) is None and store.get_playbook("zz") is None
    assert [(e.path, e.version) for e in store.list_playbooks()] == [("a/b", 1), ("a/b", 2)]


def test_two_writers_on_one_execution_lose_nothing(make_store: StoreFactory) -> None:
    first, second = make_store(), make_store()
    first.append([started(12)])
    errors: list[BaseException] = []

    def write(store: Any, tag: str) -> None:
        try:
            for i in range(100):
                store.append([event(12, ev.COMMAND_HEARTBEAT, tag, i=i)])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s, t)) for s, t in ((first, "a"), (second, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    log = first.load(12)
    assert [e.seq for e in log] == list(range(1, 202))
    assert sum(1 for e in log if e.step == "a") == sum(1 for e in log if e.step == "b") == 100
