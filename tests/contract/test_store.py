"""The store contract: one suite for every adapter (SQLite, PostgreSQL, sharded PostgreSQL)."""

from __future__ import annotations

import dataclasses
import itertools
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from milepost.core import events as ev
from milepost.errors import ClaimRefused, ConcurrencyConflict, MilepostError
from milepost.ids import Snowflake, machine_of
from milepost.settings import UnsupportedDatabase
from milepost.store import factory, migrations, port
from milepost.store.memory import MemoryStore
from milepost.store.postgres import PostgresStore, mask_url
from milepost.store.sharded import ShardedStore, shard_of
from milepost.store.sqlite import SQLiteStore
from tests.contract.old_schema import store_at_version
from tests.sql import query

StoreFactory = Callable[[], Any]
"""`make_store` and `store` (sqlite, postgres, sharded) come from conftest.py."""


_ids = itertools.count(1_000)


def new_id() -> int:
    """Ids of the events the store writes itself (claims, releases)."""
    return next(_ids)


def event(xid: int, etype: str, step: str | None = None, **payload: Any) -> ev.Event:
    return ev.new_event(
        next(_ids), xid, etype, 100.0 + next(_ids) / 1000, step=step, payload=payload
    )


def started(xid: int, path: str = "p") -> ev.Event:
    return event(xid, ev.EXECUTION_STARTED, path=path, version=1, workload={"a": 1})


def issued(xid: int, command_id: int, step: str = "s") -> ev.Event:
    return event(
        xid,
        ev.COMMAND_ISSUED,
        step,
        command_id=command_id,
        run=1,
        index=-1,
        attempt=1,
        idempotency_key="k" * 64,
    )


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
    if not isinstance(store, MemoryStore):  # it keeps events as objects: no log to keep small
        assert query(store, "SELECT count(*) FROM result_blob", ())[0][0] == 1
    uri = store.put_blob(6, b"abc", 1.0)
    assert uri.startswith("milepost://results/") and store.get_blob(uri) == b"abc"
    xid, blob_id = port.parse_blob_uri(uri)
    assert xid == 6  # the reference names its execution: a sharded store knows the shard
    for wrong in ("milepost://results/999999", f"milepost://results/7/{blob_id}"):
        with pytest.raises(MilepostError):
            store.get_blob(wrong)


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


def test_executions_are_listed_since_a_time(store: Any) -> None:
    store.append([at(started(21), 1000.0)])
    store.append([at(started(22), 2000.0)])
    assert [r.execution_id for r in store.list_executions(since=2000.0)] == [22]
    assert [r.execution_id for r in store.list_executions(since=999.5)] == [22, 21]
    assert store.list_executions(since=2000.5) == []


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
    lease = store.claim(101, "w1", now=50.0, lease_s=10.0, new_id=new_id)
    assert (lease.epoch, lease.expires_at) == (1, 60.0)
    assert (
        store.claim(101, "w1", now=51.0, lease_s=10.0, new_id=new_id).epoch == 1
    )  # repeat by the holder
    with pytest.raises(ClaimRefused) as refused:
        store.claim(101, "w2", now=52.0, lease_s=10.0, new_id=new_id)
    assert refused.value.fields["reason"] == "active_claim"
    assert (refused.value.fields["worker_id"], refused.value.fields["epoch"]) == ("w1", 1)
    assert refused.value.fields["lease_expires_at"] == 61.0
    renewed = store.heartbeat(101, "w1", 1, now=55.0, lease_s=10.0)
    assert renewed.expires_at == 65.0
    with pytest.raises(ClaimRefused):
        store.heartbeat(101, "w1", 2, now=55.0, lease_s=10.0)  # a stale epoch
    assert store.expired_claims(now=64.0) == []
    assert [c.command_id for c in store.expired_claims(now=66.0)] == [101]
    store.append([event(10, ev.COMMAND_COMPLETED, "s", command_id=101, result=None)])
    with pytest.raises(ClaimRefused) as done:
        store.claim(101, "w1", now=70.0, lease_s=10.0, new_id=new_id)
    assert done.value.fields["reason"] == "already_terminal"
    with pytest.raises(MilepostError):
        store.claim(404, "w1", now=70.0, lease_s=10.0, new_id=new_id)


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

    threads = [
        threading.Thread(target=write, args=(s, t)) for s, t in ((first, "a"), (second, "b"))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    log = first.load(12)
    assert [e.seq for e in log] == list(range(1, 202))
    assert sum(1 for e in log if e.step == "a") == sum(1 for e in log if e.step == "b") == 100


# -- server additions: credentials, tokens, claim_next, cancel, redrive, locks ---------------


def at(event_: ev.Event, created_at: float) -> ev.Event:
    return dataclasses.replace(event_, created_at=created_at)


def test_credentials_are_upserted_listed_without_their_data_and_deleted(
    make_store: StoreFactory,
) -> None:
    store = make_store()
    assert store.get_credential("db") is None and store.list_credentials() == []
    first = store.put_credential("db", "postgres", b"\x00cipher-1", 10.0)
    assert first == port.CredentialRow("db", "postgres", b"\x00cipher-1", 10.0, 10.0)
    store.put_credential("api", "http", b"cipher-a", 11.0)
    again = store.put_credential("db", "postgres_v2", b"cipher-2\xff", 12.0)
    assert (again.created_at, again.updated_at) == (10.0, 12.0)  # created_at survives
    other = make_store()  # another process sees it
    assert other.get_credential("db") == port.CredentialRow(
        "db", "postgres_v2", b"cipher-2\xff", 10.0, 12.0
    )
    assert [(c.name, c.type, c.ciphertext) for c in other.list_credentials()] == [
        ("api", "http", None),
        ("db", "postgres_v2", None),
    ]
    assert other.delete_credential("db") is True
    assert store.delete_credential("db") is False
    assert store.get_credential("db") is None
    assert [c.name for c in store.list_credentials()] == ["api"]


def test_tokens_are_found_by_their_hash(make_store: StoreFactory) -> None:
    store, other = make_store(), make_store()
    row = store.create_token("a" * 64, "worker", "w1", 5.0)
    assert row == port.TokenRow("a" * 64, "worker", "w1", 5.0)
    store.create_token("b" * 64, "viewer", None, 6.0)
    assert other.get_token("a" * 64) == row
    assert other.get_token("b" * 64) == port.TokenRow("b" * 64, "viewer", None, 6.0)
    assert other.get_token("c" * 64) is None
    with pytest.raises(ConcurrencyConflict):
        other.create_token("a" * 64, "admin", None, 7.0)
    assert store.get_token("a" * 64).role == "worker"  # the first one stands


def test_claim_next_takes_the_oldest_queued_commands_of_running_executions(store: Any) -> None:
    # issued newest-id-first: "oldest" is by issue time, not by id
    store.append([started(20), issued(20, 203), issued(20, 202), issued(20, 201)])
    store.append([started(21), event(21, ev.EXECUTION_FAILED, error={"message": "x"})])
    store.append([issued(21, 211)])  # queued, but its execution is not RUNNING
    store.append([issued(22, 221)])  # queued, and no execution row at all
    first = store.claim_next("w1", now=50.0, lease_s=10.0, limit=2, new_id=new_id)
    assert [(c.command_id, c.status, c.worker_id, c.epoch) for c, _ in first] == [
        (203, port.COMMAND_CLAIMED, "w1", 1),
        (202, port.COMMAND_CLAIMED, "w1", 1),
    ]
    assert [(le.command_id, le.worker_id, le.epoch, le.expires_at) for _, le in first] == [
        (203, "w1", 1, 60.0),
        (202, "w1", 1, 60.0),
    ]
    rest = store.claim_next("w2", now=51.0, lease_s=10.0, limit=5, new_id=new_id)
    assert [c.command_id for c, _ in rest] == [201]
    assert store.claim_next("w3", now=52.0, lease_s=10.0, limit=5, new_id=new_id) == []
    assert store.claim_next("w3", now=52.0, lease_s=10.0, limit=0, new_id=new_id) == []
    # the claims are real: heartbeat and claim know them
    assert store.heartbeat(203, "w1", 1, now=55.0, lease_s=10.0).expires_at == 65.0
    with pytest.raises(ClaimRefused) as refused:
        store.claim(201, "w1", now=52.0, lease_s=10.0, new_id=new_id)
    assert refused.value.fields["reason"] == "active_claim"
    assert store.get_command(211).status == store.get_command(221).status == port.COMMAND_QUEUED


def test_a_batch_larger_than_one_statement_is_stored_whole(store: Any) -> None:
    # PostgreSQL writes rows 500 to a statement: 1,201 events and 1,200 commands span three
    first = [started(28)] + [issued(28, 280_000 + i) for i in range(1200)]
    stored = store.append(first)
    assert [e.seq for e in stored] == list(range(1, 1202))
    assert len(store.open_commands(28)) == 1200
    # repeated ids among new ones: only the new are stored, numbered on from the last
    again = [first[5], issued(28, 290_000), first[700], issued(28, 290_001)]
    assert [(e.event_id, e.seq) for e in store.append(again)] == [
        (again[1].event_id, 1202),
        (again[3].event_id, 1203),
    ]


def test_get_commands_reads_a_batch_by_id(store: Any) -> None:
    store.append([started(27), issued(27, 271), issued(27, 272)])
    rows = store.get_commands([272, 999, 271, 272])
    assert sorted(rows) == [271, 272]
    assert rows[271] == store.get_command(271)
    assert store.get_commands([]) == {}


def test_append_and_claim_hands_out_the_commands_it_just_issued(store: Any) -> None:
    store.append([started(24), issued(24, 241)])
    req = port.ClaimRequest("w1", now=10.0, lease_s=5.0, limit=3, new_id=new_id)
    stored, claimed = store.append_and_claim([issued(24, 242), issued(24, 243)], req)
    assert [e.seq for e in stored] == [3, 4]
    # oldest first: the command queued before the append, then the two it issued
    assert [(c.command_id, c.status, c.worker_id, c.epoch) for c, _ in claimed] == [
        (241, port.COMMAND_CLAIMED, "w1", 1),
        (242, port.COMMAND_CLAIMED, "w1", 1),
        (243, port.COMMAND_CLAIMED, "w1", 1),
    ]
    assert all(lease.expires_at == 15.0 for _, lease in claimed)
    assert store.claim_next("w2", now=11.0, lease_s=5.0, limit=5, new_id=new_id) == []
    # nothing to append: a plain claim; nothing queued: nothing claimed
    assert store.append_and_claim([], req) == ([], [])


def test_append_with_an_expected_seq_refuses_when_the_log_moved(store: Any) -> None:
    store.append([started(25), issued(25, 251)])
    with pytest.raises(port.LogMoved) as moved:
        store.append([issued(25, 252)], expect={25: 1})  # the caller has not seen seq 2
    assert moved.value.fields["execution_ids"] == ["25"]
    assert [e.seq for e in store.load(25)] == [1, 2]  # nothing written
    assert store.get_command(252) is None
    stored = store.append([issued(25, 252)], expect={25: 2, 99: 7})  # 99: not written to
    assert [e.seq for e in stored] == [3]
    # a new execution is expected at 0; a claim in a refused append is rolled back too
    with pytest.raises(port.LogMoved):
        store.append_and_claim(
            [issued(25, 253)], port.ClaimRequest("w", 1.0, 5.0, 5, new_id=new_id), expect={25: 2}
        )
    assert store.get_command(251).status == port.COMMAND_QUEUED
    assert [e.seq for e in store.append([started(26)], expect={26: 0})] == [1]


def report(xid: int, command_id: int, epoch: int, **meta: Any) -> ev.Event:
    return dataclasses.replace(
        event(
            xid,
            ev.COMMAND_COMPLETED,
            "s",
            command_id=command_id,
            run=1,
            index=-1,
            attempt=1,
            epoch=epoch,
            result=1,
            ctx={},
        ),
        meta={"epoch": epoch, **meta},
    )


def test_append_checking_claims_writes_only_while_the_reported_claims_are_live(store: Any) -> None:
    store.append([started(28), issued(28, 281), issued(28, 282)])
    [(_, lease)] = store.claim_next("w1", 10.0, 60.0, 1, new_id=new_id)  # 281, epoch 1
    assert store.release(281, "w1", lease.epoch, 11.0, new_id=new_id)
    [(_, again)] = store.claim_next("w2", 12.0, 60.0, 1, new_id=new_id)  # 281 again: epoch 2
    assert again.epoch == 2
    for moved in (
        report(28, 281, 1),  # the released claim's epoch
        report(28, 282, 0),
    ):  # a queued command: nobody holds it
        with pytest.raises(port.ClaimMoved):
            store.append_and_claim(
                [moved, issued(28, 283)],
                port.ClaimRequest("w", 13.0, 5.0, 5, new_id=new_id),
                check_claims=True,
            )
        # nothing written, nothing claimed: the three events, then claim, release, claim
        assert [e.seq for e in store.load(28)] == [1, 2, 3, 4, 5, 6]
        assert store.get_command(283) is None
        assert store.get_command(282).status == port.COMMAND_QUEUED
    # a report the caller marked stale is not checked: it settles nothing
    stored = store.append([report(28, 281, 1, stale=True)], check_claims=True)
    assert len(stored) == 1 and store.get_command(281).status == port.COMMAND_CLAIMED
    # the live claim's report goes in and settles its command
    stored = store.append([report(28, 281, 2)], check_claims=True)
    assert [e.seq for e in stored] == [8]  # after the stale one (7)
    assert store.get_command(281).status == port.COMMAND_COMPLETED


def settlement(xid: int, command_id: int, epoch: int) -> ev.Event:
    """The engine's own `command.failed` of a command, built from its row at `epoch`."""
    return dataclasses.replace(
        event(
            xid,
            ev.COMMAND_FAILED,
            "s",
            command_id=command_id,
            run=1,
            index=-1,
            attempt=1,
            epoch=epoch,
            error={"kind": "cancelled"},
        ),
        meta={"epoch": epoch, ev.SETTLES: True},
    )


def test_the_engines_settlement_is_written_only_while_its_row_is_open_at_its_epoch(
    store: Any,
) -> None:
    # issue 33: the engine read a queued command, a worker claimed it, and the engine's
    # command.failed (epoch 0) overwrote the live claim: the worker ran a cancelled step
    store.append([started(29), issued(29, 291), issued(29, 292), issued(29, 293)])
    [(_, lease)] = store.claim_next("w1", 10.0, 60.0, 1, new_id=new_id)  # 291, epoch 1
    for moved in (
        settlement(29, 291, 0),  # read while queued, claimed since
        settlement(29, 291, 2),  # an epoch the row never had
    ):
        for check_claims in (False, True):  # checked whatever the caller asks
            with pytest.raises(port.ClaimMoved):
                store.append([moved, settlement(29, 292, 0)], check_claims=check_claims)
            # nothing written: not the other command's settlement either
            assert [e.seq for e in store.load(29)] == [1, 2, 3, 4, 5]  # and the claim
            assert store.get_command(291).status == port.COMMAND_CLAIMED
            assert store.get_command(292).status == port.COMMAND_QUEUED
    # open at its epoch: a queued command (never claimed) and the live claim go in
    stored = store.append([settlement(29, 292, 0), settlement(29, 291, lease.epoch)])
    assert len(stored) == 2
    assert store.get_command(291).status == store.get_command(292).status == "failed"
    # a settled row takes no second settlement, nor a lost one
    with pytest.raises(port.ClaimMoved):
        store.append([settlement(29, 292, 0)])
    # released: queued again at the claim's epoch, which is what the engine read
    [(_, again)] = store.claim_next("w2", 11.0, 60.0, 1, new_id=new_id)  # 293, epoch 1
    assert store.release(293, "w2", again.epoch, 12.0, new_id=new_id)
    assert len(store.append([settlement(29, 293, again.epoch)])) == 1
    assert store.get_command(293).status == "failed"


def test_a_sharded_store_checks_each_shards_claims_in_that_shards_transaction(pg: Any) -> None:
    shards = ShardedStore([PostgresStore(pg.create(), min_size=1, max_size=2) for _ in range(2)])
    try:
        xids = [next(x for x in range(1, 200) if shard_of(x, 2) == i) for i in (0, 1)]
        shards.append([started(x) for x in xids] + [issued(x, x * 10) for x in xids])
        claimed = {
            row.execution_id: lease
            for row, lease in shards.claim_next("w", 1.0, 60.0, 2, new_id=new_id)
        }
        assert sorted(claimed) == sorted(xids)
        first, second = xids
        # the second shard's claim moves: its append refuses, writing nothing there
        assert shards.release(second * 10, "w", claimed[second].epoch, 2.0, new_id=new_id)
        with pytest.raises(port.ClaimMoved):
            shards.append(
                [
                    report(first, first * 10, claimed[first].epoch),
                    report(second, second * 10, claimed[second].epoch),
                ],
                check_claims=True,
            )
        assert shards.get_command(second * 10).status == port.COMMAND_QUEUED
        # the report was not written there: the log holds the claim and its release only
        assert [e.event_type for e in shards.load(second)] == [
            ev.EXECUTION_STARTED,
            ev.COMMAND_ISSUED,
            ev.COMMAND_CLAIMED,
            ev.COMMAND_RELEASED,
        ]
        # each shard's live claim goes in, checked there
        [(_, again)] = shards.claim_next("w", 3.0, 60.0, 1, new_id=new_id)
        stored = shards.append([report(second, second * 10, again.epoch)], check_claims=True)
        assert len(stored) == 1 and shards.get_command(second * 10).status == "completed"
    finally:
        shards.close()


def test_an_append_that_fails_late_writes_nothing_even_when_the_caller_vouches(store: Any) -> None:
    # `expect` covering the execution is the path that sends everything in one go (on
    # PostgreSQL: no BEGIN/COMMIT, one pipeline Sync): a failure in its last statements
    # must still undo the first ones
    store.append([started(29), issued(29, 291)])
    reused = issued(29, 291)  # a new event issuing a command id that exists: refused
    with pytest.raises((MilepostError, sqlite3.IntegrityError)):
        store.append_and_claim(
            [event(29, ev.STEP_ENTER, "t", run=1), reused],
            port.ClaimRequest("w", 1.0, 5.0, 5, new_id=new_id),
            expect={29: 2},
        )
    assert [e.seq for e in store.load(29)] == [1, 2]
    assert store.get_command(291).status == port.COMMAND_QUEUED  # nor was anything claimed


def test_claims_log_their_events_with_ids_of_a_generator_that_makes_blocks(store: Any) -> None:
    # the engine's generators reserve a block of `limit` ids for a claim (one parameter on
    # PostgreSQL, not a list); the ids the claims log are theirs, and nobody else gets them
    gen = Snowflake(7, lambda: 1_800_000_000.0)
    store.append([started(31), issued(31, 311), issued(31, 312), issued(31, 313)])
    alone = store.claim_next("w", 1.0, 5.0, 2, new_id=gen)
    _, after = store.append_and_claim(
        [event(31, ev.STEP_ENTER, "t", run=1)], port.ClaimRequest("w", 1.0, 5.0, 4, new_id=gen)
    )
    leases = [lease for _, lease in alone + after]
    assert [row.command_id for row, _ in alone + after] == [311, 312, 313]
    logged = [e for e in store.load(31) if e.event_type == ev.COMMAND_CLAIMED]
    assert [e.event_id for e in logged] == [lease.event.event_id for lease in leases]
    assert [e.payload["command_id"] for e in logged] == [311, 312, 313]
    next_id = gen()
    assert all(machine_of(e.event_id) == 7 and e.event_id < next_id for e in logged)


def test_claim_next_can_be_limited_to_a_pool(store: Any) -> None:
    store.append(
        [
            started(23),
            issued(23, 231),
            event(
                23,
                ev.COMMAND_ISSUED,
                "g",
                command_id=232,
                run=1,
                attempt=1,
                idempotency_key="g" * 64,
                pool="gpu",
            ),
        ]
    )
    assert [
        c.command_id for c, _ in store.claim_next("w", 1.0, 5.0, 5, pool="gpu", new_id=new_id)
    ] == [232]
    assert store.claim_next("w", 1.0, 5.0, 5, pool="gpu", new_id=new_id) == []
    assert [
        c.command_id for c, _ in store.claim_next("w", 1.0, 5.0, 5, pool="default", new_id=new_id)
    ] == [231]


def test_racing_workers_claim_every_command_exactly_once(
    make_store: StoreFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = make_store()
    expected: set[int] = set()
    for x in range(20):  # 20 executions x 10 commands
        xid = 300 + x
        ids = [30_000 + x * 100 + i for i in range(10)]
        expected.update(ids)
        setup.append([started(xid)] + [issued(xid, cid) for cid in ids])
    workers = 8
    stores = [make_store() for _ in range(workers)]  # one store (pool) per "process"
    claimed: dict[int, list[tuple[int, int]]] = {w: [] for w in range(workers)}
    errors: list[BaseException] = []
    gate = threading.Barrier(workers)

    def work(w: int) -> None:
        try:
            gate.wait()
            while True:
                got = stores[w].claim_next(
                    f"w{w}", now=1000.0, lease_s=60.0, limit=w % 3 + 1, new_id=new_id
                )
                if not got:
                    return
                claimed[w].extend((c.command_id, lease.epoch) for c, lease in got)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    assert errors == []
    every = [cid for got in claimed.values() for cid, _ in got]
    assert len(every) == len(expected) == 200 and set(every) == expected  # each exactly once
    assert {epoch for got in claimed.values() for _, epoch in got} == {1}
    rows = {c.command_id: c for c in setup.open_commands()}
    assert all(
        rows[cid].worker_id == f"w{w}" and rows[cid].status == port.COMMAND_CLAIMED
        for w, got in claimed.items()
        for cid, _ in got
    )
    with capsys.disabled():
        print(
            f"\nclaim race [{getattr(make_store, 'kind', '?')}]: 200 commands, {workers} workers,"
            f" {elapsed:.3f}s, per worker {[len(claimed[w]) for w in range(workers)]}"
        )


def test_claims_are_refused_for_a_cancelled_execution(store: Any) -> None:
    store.append([started(40), issued(40, 401), issued(40, 402), issued(40, 403)])
    lease = store.claim(401, "w1", now=50.0, lease_s=10.0, new_id=new_id)
    assert store.get_execution(40).cancel_requested is False
    store.append([event(40, ev.EXECUTION_CANCEL_REQUESTED)])
    row = store.get_execution(40)
    assert (row.cancel_requested, row.status) == (True, "RUNNING")
    for cid, worker in ((402, "w2"), (401, "w1")):  # a queued one, and the holder's repeat
        with pytest.raises(ClaimRefused) as refused:
            store.claim(cid, worker, now=51.0, lease_s=10.0, new_id=new_id)
        assert refused.value.fields["reason"] == "execution_cancelled"
    assert store.claim_next("w3", now=51.0, lease_s=10.0, limit=10, new_id=new_id) == []
    # the holder still heartbeats (and reads the flag to learn it should stop)
    assert store.heartbeat(401, "w1", lease.epoch, now=52.0, lease_s=10.0).expires_at == 62.0
    store.append([event(40, ev.EXECUTION_CANCELLED)])
    with pytest.raises(ClaimRefused) as refused:
        store.claim(403, "w2", now=53.0, lease_s=10.0, new_id=new_id)
    assert refused.value.fields["reason"] == "execution_cancelled"
    # cancelled without a request first: refused for the same reason
    store.append([started(42), issued(42, 421)])
    store.append([event(42, ev.EXECUTION_CANCELLED)])
    with pytest.raises(ClaimRefused) as refused:
        store.claim(421, "w2", now=53.0, lease_s=10.0, new_id=new_id)
    assert refused.value.fields["reason"] == "execution_cancelled"
    # other executions are unaffected
    store.append([started(41), issued(41, 411)])
    assert [
        c.command_id for c, _ in store.claim_next("w3", 54.0, 10.0, limit=10, new_id=new_id)
    ] == [411]


def test_executions_to_redrive_are_running_idle_and_without_live_commands(store: Any) -> None:
    store.append([at(started(50), 200.0)])  # running, nothing to do: re-drive once idle
    store.append([at(started(51), 200.0), at(issued(51, 511), 200.0)])  # queued work
    store.append([at(started(52), 200.0), at(issued(52, 521), 200.0)])
    store.claim(
        521, "w", now=200.0, lease_s=1.0, new_id=new_id
    )  # claimed (even lapsed): the reconciler's
    store.append([at(started(53), 200.0), at(issued(53, 531), 200.0)])
    store.append([at(event(53, ev.COMMAND_COMPLETED, "s", command_id=531, result=1), 300.0)])
    store.append([at(started(54), 200.0), at(event(54, ev.EXECUTION_COMPLETED), 200.0)])
    store.append([at(started(55), 200.0), at(event(55, ev.EXECUTION_CANCEL_REQUESTED), 200.0)])
    assert store.executions_to_redrive(now=204.0) == []  # idle 4 s < 5 s
    assert store.executions_to_redrive(now=206.0) == [50, 55]
    assert store.executions_to_redrive(now=306.0) == [50, 53, 55]
    assert store.executions_to_redrive(now=306.0, idle_s=60.0) == [50, 55]


def test_lock_execution_excludes_a_second_holder(make_store: StoreFactory) -> None:
    first, second = make_store(), make_store()
    holding, release = threading.Event(), threading.Event()
    trying = [threading.Event(), threading.Event()]
    order: list[str] = []

    def hold() -> None:
        with first.lock_execution(60):
            order.append("first in")
            holding.set()
            release.wait(30)
            order.append("first out")

    def contend(store: Any, name: str, ready: threading.Event) -> None:
        holding.wait(30)
        ready.set()
        with store.lock_execution(60):
            order.append(name)

    threads = [
        threading.Thread(target=hold),
        threading.Thread(target=contend, args=(second, "other store in", trying[0])),
        threading.Thread(target=contend, args=(first, "other thread in", trying[1])),
    ]
    for t in threads:
        t.start()
    assert holding.wait(30) and trying[0].wait(30) and trying[1].wait(30)
    with second.lock_execution(61), first.lock_execution(62), first.lock_execution(62):
        order.append("other executions, reentrant")  # not blocked by 60, nor by itself
    threads[1].join(0.5)
    threads[2].join(0.1)
    assert threads[1].is_alive() and threads[2].is_alive()  # both still waiting for 60
    release.set()
    for t in threads:
        t.join(30)
    assert order[:3] == ["first in", "other executions, reentrant", "first out"]
    assert sorted(order[3:]) == ["other store in", "other thread in"]


@pytest.mark.parametrize("make_store", ["sqlite", "postgres"], indirect=True)  # a dialect's own
def test_a_commit_the_database_refuses_leaves_the_store_usable(make_store: StoreFactory) -> None:
    # a commit can fail where its statements did not (a constraint checked at the end, a
    # full disk): SQLite then keeps the transaction open, and every later write on the
    # store's one connection failed ("cannot start a transaction within a transaction")
    store = make_store()
    with store.txn() as conn:
        conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE child (parent_id INTEGER REFERENCES parent (id)"
            " DEFERRABLE INITIALLY DEFERRED)"
        )
    with pytest.raises(port.StoreError) as refused, store.txn() as conn:
        conn.execute("INSERT INTO child (parent_id) VALUES (42)")  # checked at the commit
    # the database failing, on both dialects: not a conflict (a row already there)
    assert not isinstance(refused.value, ConcurrencyConflict)
    assert query(store, "SELECT count(*) FROM child", ()) == [(0,)]
    stored = store.append([started(31)])
    assert [e.seq for e in stored] == [1] and store.get_execution(31) is not None


def test_the_same_events_from_two_writers_are_stored_once(make_store: StoreFactory) -> None:
    first, second = make_store(), make_store()
    first.append([started(70)])
    batch = [event(70, ev.COMMAND_HEARTBEAT, "s", i=i) for i in range(50)]
    results: list[list[ev.Event]] = []
    gate = threading.Barrier(2)

    def write(store: Any) -> None:
        gate.wait()
        results.append(store.append(batch))

    threads = [threading.Thread(target=write, args=(s,)) for s in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(r) for r in results) == [0, 50]  # one batch is one transaction
    log = first.load(70)
    assert [e.seq for e in log] == list(range(1, 52))
    assert [e.event_id for e in log[1:]] == [e.event_id for e in batch]


# -- migrations: both dialects, from zero and from version 1 ---------------------------------


def _sqlite_columns(store: SQLiteStore) -> set[tuple[str, str, bool]]:
    tables = [
        r[0]
        for r in query(
            store, "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    return {
        (t, r[1], bool(r[3] or r[5]))
        for t in tables
        for r in query(store, f"PRAGMA table_info({t})")
    }


def _pg_columns(store: PostgresStore) -> set[tuple[str, str, bool]]:
    rows = query(
        store,
        "SELECT table_name, column_name, is_nullable FROM"
        " information_schema.columns WHERE table_schema='public'",
    )
    return {(t, c, nullable == "NO") for t, c, nullable in rows}


def test_both_dialects_describe_the_same_tables_and_columns(pg: Any, tmp_path: Path) -> None:
    lite = SQLiteStore(tmp_path / "schema.db")
    url = pg.create(empty=True)  # migrate from zero, not the template
    pgs = PostgresStore(url, min_size=1, max_size=1)
    try:
        assert lite.schema_version() == pgs.schema_version() == len(migrations.scripts("sqlite"))
        assert len(migrations.scripts("sqlite")) == len(migrations.scripts("postgres"))
        columns = _sqlite_columns(lite)
        assert columns == _pg_columns(pgs)  # names and NOT NULL alike
        assert {
            ("execution", "cancel_requested", True),
            ("credential", "ciphertext", True),
            ("token", "token_hash", True),
            ("command", "pool", True),
        } <= columns
        lite_idx = {
            r[0]
            for r in query(
                lite, "SELECT name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL"
            )
        }
        pg_idx = {
            r[0]
            for r in query(
                pgs,
                "SELECT indexname FROM pg_indexes WHERE"
                " schemaname='public' AND indexname NOT LIKE"
                " '%%_pkey' AND indexname NOT LIKE '%%_key'",
            )
        }
        assert lite_idx == pg_idx and "command_queue" in lite_idx
    finally:
        lite.close()
        pgs.close()
        pg.drop(url)


_V1_ROWS = [
    (
        "INSERT INTO execution (execution_id, path, version, status, created_at, updated_at)"
        " VALUES (80, 'p', 1, 'RUNNING', 1.0, 1.0)"
    ),
    (
        "INSERT INTO command (command_id, execution_id, step, run, idx, attempt,"
        " idempotency_key, status, created_at, updated_at)"
        " VALUES (801, 80, 's', 1, -1, 1, 'k', 'queued', 1.0, 1.0)"
    ),
    (
        "INSERT INTO event (event_id, execution_id, seq, event_type, status, created_at)"
        " VALUES (1, 80, 1, 'execution.cancel_requested', 'RUNNING', 2.0)"
    ),
]


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_a_version_1_database_upgrades_and_backfills_the_cancel_flag(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = store_at_version(dialect, 1, _V1_ROWS, tmp_path, request)
    try:
        assert store.schema_version() == len(migrations.scripts(dialect)) >= 2
        assert store.get_execution(80).cancel_requested is True
        with pytest.raises(ClaimRefused) as refused:
            store.claim(801, "w", now=3.0, lease_s=1.0, new_id=new_id)
        assert refused.value.fields["reason"] == "execution_cancelled"
        assert store.get_command(801).status == port.COMMAND_QUEUED
        # the log came through version 15 (keyed by event_id, its surrogate id dropped)
        # whole, and appends go on after it
        assert [(e.event_id, e.seq) for e in store.load(80)] == [(1, 1)]
        more = ev.new_event(new_id(), 80, ev.EXECUTION_FAILED, 4.0, status="FAILED")
        assert [e.seq for e in store.append([more])] == [2]
        assert [e.event_id for e in store.load(80)] == [1, more.event_id]
    finally:
        store.close()


# -- factory, upgrade, sharding --------------------------------------------------------------


def test_open_store_picks_the_adapter_by_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(factory.URLS_ENV, raising=False)
    for url in (str(tmp_path / "a.db"), f"sqlite:///{tmp_path / 'b.db'}"):
        opened = factory.open_store(url)
        assert isinstance(opened, SQLiteStore) and opened.path == str(tmp_path / url[-4:])
        opened.close()
    with pytest.raises(UnsupportedDatabase) as bad:
        factory.open_store("mysql://root:hunter2@db/x")
    assert "mysql://root:***@db/x" in str(bad.value) and "hunter2" not in str(bad.value)
    monkeypatch.setenv(factory.URLS_ENV, f"{tmp_path / 'c.db'}, {tmp_path / 'd.db'}")
    sharded = factory.open_store()
    assert isinstance(sharded, ShardedStore)
    assert [s.path for s in sharded.stores] == [str(tmp_path / "c.db"), str(tmp_path / "d.db")]
    sharded.close()
    monkeypatch.setenv(factory.URLS_ENV, "")
    monkeypatch.setenv("MILEPOST_DATABASE_URL", str(tmp_path / "e.db"))
    single = factory.open_store()
    assert isinstance(single, SQLiteStore) and single.path == str(tmp_path / "e.db")
    single.close()
    assert factory.upgrade(str(tmp_path / "e.db")) == (
        f"database sqlite:///{tmp_path / 'e.db'} at schema version {len(migrations.scripts('sqlite'))}"
    )


def test_open_store_and_upgrade_on_postgresql(pg: Any) -> None:
    urls = [pg.create(empty=True), pg.create(empty=True)]
    names = [urlsplit(u).path.lstrip("/") for u in urls]
    try:
        for scheme in ("postgresql", "postgres"):
            opened = factory.open_store(scheme + urls[0][urls[0].index("://") :])
            assert isinstance(opened, PostgresStore)
            opened.close()
        secret = [pg.url(name, password="s3cret") for name in names]
        lines = factory.upgrade(urls=secret).splitlines()
        version = len(migrations.scripts("postgres"))
        assert lines == [f"database {mask_url(u)} at schema version {version}" for u in secret]
        assert all("s3cret" not in line and ":***@" in line for line in lines)
        assert lines[0].endswith(f"/{names[0]} at schema version {version}")
        assert factory.upgrade(secret[0]) == lines[0]  # idempotent
    finally:
        for url in urls:
            pg.drop(url)


def test_an_unreachable_postgresql_is_a_milepost_error() -> None:
    began = time.monotonic()
    with pytest.raises(port.StoreUnavailable) as down:
        PostgresStore("postgresql://postgres:pw@127.0.0.1:1/nowhere", connect_timeout=1.0)
    assert "pw" not in str(down.value) and isinstance(down.value, MilepostError)
    assert isinstance(down.value.__cause__, psycopg.Error) and time.monotonic() - began < 15


def test_shard_placement_spreads_snowflakes() -> None:
    clock = itertools.count(1_800_000_000_000)
    snowflake = Snowflake(0, lambda: next(clock) / 1000)  # one id per millisecond: seq 0
    ids = [snowflake() for _ in range(1000)]
    assert {x % 2 for x in ids} == {0}  # why plain modulo would not do
    counts = [sum(1 for x in ids if shard_of(x, 2) == k) for k in (0, 1)]
    assert min(counts) > 400
    assert {shard_of(x, 3) for x in ids} == {0, 1, 2}


def test_a_sharded_store_keeps_each_execution_on_one_shard(pg: Any) -> None:
    urls = [pg.create(), pg.create()]
    store = ShardedStore([PostgresStore(u, min_size=1, max_size=2) for u in urls])
    try:
        _check_sharding(store)
    finally:
        store.close()
        for url in urls:
            pg.drop(url)


def _check_sharding(store: ShardedStore) -> None:
    xids = list(range(90, 110))
    homes = {x: shard_of(x, 2) for x in xids}
    assert set(homes.values()) == {0, 1}
    for n, xid in enumerate(xids):
        store.append([at(started(xid), 500.0 + n), at(issued(xid, xid * 10), 500.0 + n)])
    for xid in xids:
        mine, theirs = store.stores[homes[xid]], store.stores[1 - homes[xid]]
        assert mine.get_execution(xid) is not None and theirs.get_execution(xid) is None
        assert [e.seq for e in mine.load(xid)] == [1, 2] and theirs.load(xid) == []
        assert store.get_command(xid * 10).execution_id == xid
    # the list merges the shards, newest first, and pages after the merge
    newest_first = list(reversed(xids))
    assert [r.execution_id for r in store.list_executions(limit=5, offset=3)] == newest_first[3:8]
    assert [r.execution_id for r in store.list_executions(limit=100)] == newest_first
    # `since`: started at or after it, on every shard
    assert [r.execution_id for r in store.list_executions(since=515.0)] == newest_first[:5]
    # claim_next finds work on every shard; claim and heartbeat reach the right one
    got = store.claim_next("w", now=1.0, lease_s=5.0, limit=100, new_id=new_id)
    assert sorted(c.command_id for c, _ in got) == [x * 10 for x in xids]
    assert store.heartbeat(900, "w", 1, now=2.0, lease_s=5.0).expires_at == 7.0
    # results live with their execution; the catalog and secrets on the first shard
    xid = next(x for x in xids if homes[x] == 1)
    uri = store.put_blob(xid, b"blob", 1.0)
    assert store.get_blob(uri) == b"blob"
    with pytest.raises(MilepostError):
        store.stores[0].get_blob(uri)
    store.register_playbook("a/b", "text", 1.0)
    store.put_credential("c", "t", b"x", 1.0)
    store.create_token("h" * 64, "admin", None, 1.0)
    assert store.stores[0].get_playbook("a/b") is not None
    assert (
        store.stores[1].get_playbook("a/b") is None and store.stores[1].get_credential("c") is None
    )
    assert store.stores[1].get_token("h" * 64) is None and store.get_token("h" * 64) is not None


def test_release_gives_a_live_claim_back_to_the_queue(store: Any) -> None:
    store.append([started(24), issued(24, 241)])
    lease = store.claim(241, "w1", now=10.0, lease_s=5.0, new_id=new_id)
    for worker, epoch in (("w2", lease.epoch), ("w1", lease.epoch + 1)):
        with pytest.raises(ClaimRefused) as refused:
            store.release(241, worker, epoch, now=11.0, new_id=new_id)
        assert refused.value.fields["reason"] == "stale_epoch"
    assert store.release(241, "w1", lease.epoch, now=11.0, new_id=new_id) is True
    row = store.get_command(241)
    assert (row.status, row.worker_id, row.lease_expires_at, row.attempt) == (
        port.COMMAND_QUEUED,
        None,
        None,
        1,
    )
    with pytest.raises(ClaimRefused):
        store.heartbeat(241, "w1", lease.epoch, now=12.0, lease_s=5.0)  # the claim is gone
    [(again, second)] = store.claim_next("w2", now=12.0, lease_s=5.0, new_id=new_id)
    assert (again.command_id, second.worker_id, second.epoch) == (241, "w2", lease.epoch + 1)


def test_one_leader_per_postgresql_database(pg: Any) -> None:
    url = pg.create()
    first, second = (PostgresStore(url, min_size=1, max_size=1) for _ in range(2))
    try:
        assert first.try_leader_lock() is True and first.try_leader_lock() is True
        assert second.try_leader_lock() is False
        sharded = ShardedStore([second])
        assert sharded.try_leader_lock() is False
        first.close()  # the leader goes away: its session, and the lock, end
        # PostgreSQL ends the session (and frees the lock) a moment after the client closes
        deadline = time.monotonic() + 10
        while not second.try_leader_lock():
            assert time.monotonic() < deadline, "the lock outlived its session"
            time.sleep(0.01)
    finally:
        first.close()
        second.close()
        pg.drop(url)


def stale(event_: ev.Event) -> ev.Event:
    return dataclasses.replace(event_, meta={"epoch": 0, "stale": True, "stale_reason": "epoch"})


def test_a_stale_report_changes_no_projection(store: Any) -> None:
    store.append([started(25), issued(25, 251), issued(25, 252)])
    store.claim(251, "w1", now=10.0, lease_s=5.0, new_id=new_id)
    stored = store.append(
        [
            stale(event(25, ev.COMMAND_COMPLETED, "s", command_id=251, result=1)),
            stale(event(25, ev.COMMAND_FAILED, "s", command_id=252, error={"message": "x"})),
            stale(event(25, ev.EXECUTION_FAILED, error={"message": "late"})),
        ]
    )
    assert len(stored) == 3 and all(e.meta["stale"] for e in store.load(25)[-3:])  # in the log
    one, two = store.get_command(251), store.get_command(252)
    assert (one.status, one.worker_id, two.status) == (
        port.COMMAND_CLAIMED,
        "w1",
        port.COMMAND_QUEUED,
    )
    assert store.get_execution(25).status == "RUNNING" and store.get_execution(25).error is None
    store.append([event(25, ev.COMMAND_COMPLETED, "s", command_id=251, result=2)])  # the live one
    assert store.get_command(251).status == port.COMMAND_COMPLETED


def test_a_lease_expiry_settles_the_lapsed_claim_only(store: Any) -> None:
    store.append([started(26), issued(26, 261), issued(26, 262)])
    store.claim(261, "w1", now=10.0, lease_s=5.0, new_id=new_id)
    first = store.claim(262, "w1", now=10.0, lease_s=5.0, new_id=new_id)
    store.release(262, "w1", first.epoch, now=11.0, new_id=new_id)
    store.claim(262, "w2", now=12.0, lease_s=50.0, new_id=new_id)  # epoch 2, live
    assert [c.command_id for c in store.expired_claims(now=20.0)] == [261]
    store.append(
        [
            event(26, ev.COMMAND_LEASE_EXPIRED, "s", command_id=261, epoch=1),
            event(26, ev.COMMAND_LEASE_EXPIRED, "s", command_id=262, epoch=1),  # late, old epoch
        ]
    )
    assert store.get_command(261).status == port.COMMAND_FAILED
    assert (store.get_command(262).status, store.get_command(262).epoch) == (
        port.COMMAND_CLAIMED,
        2,
    )
    assert store.expired_claims(now=20.0) == []  # no longer listed
    assert [c.command_id for c in store.open_commands(26)] == [262]
    store.append([event(26, ev.COMMAND_COMPLETED, "s", command_id=262, result=None)])
    last = store.load(26)[-1].created_at
    assert store.executions_to_redrive(now=last + 6.0) == [26]  # the run is visible again


def test_a_run_that_ends_in_the_batch_that_issued_commands_leaves_none_queued(store: Any) -> None:
    store.append([started(13), issued(13, 131), event(13, ev.EXECUTION_CANCELLED)])
    assert store.open_commands(13) == []
    assert store.get_command(131).status == port.COMMAND_CANCELLED


# -- the driver lease of an embedded execution ---------------------------------------------


def test_a_driver_lease_has_one_holder_until_it_expires(make_store: StoreFactory) -> None:
    a, b = make_store(), make_store()  # two processes on one database
    assert a.get_driver(80) is None
    assert a.acquire_driver(80, "host:1:a", 100.0, 15.0) == port.DriverLease(80, "host:1:a", 115.0)
    with pytest.raises(port.DriverBusy) as refused:
        b.acquire_driver(80, "host:2:b", 110.0, 15.0)
    assert refused.value.lease == port.DriverLease(80, "host:1:a", 115.0)
    assert refused.value.code == "driver_busy"
    assert (
        refused.value.message
        == "execution 80 is driven by host:1:a until 1970-01-01T00:01:55+00:00"
    )
    assert refused.value.fields["holder"] == "host:1:a"
    assert a.acquire_driver(80, "host:1:a", 110.0, 15.0).expires_at == 125.0  # renewed
    assert a.renew_driver(80, "host:1:a", 120.0, 15.0) and b.get_driver(80).expires_at == 135.0
    assert not b.renew_driver(80, "host:2:b", 120.0, 15.0)  # renewing is no way to take it
    assert b.acquire_driver(80, "host:2:b", 135.0, 15.0).holder == "host:2:b"  # expired: taken
    assert not a.renew_driver(80, "host:1:a", 136.0, 15.0)  # lost, and told so
    assert a.get_driver(80) == port.DriverLease(80, "host:2:b", 150.0)
    assert a.get_driver(81) is None  # other executions are not touched


def test_a_released_driver_lease_is_free_at_once_and_remembers_its_holder(
    make_store: StoreFactory,
) -> None:
    a, b = make_store(), make_store()
    a.acquire_driver(82, "host:1:a", 100.0, 15.0)
    assert not b.release_driver(82, "host:2:b", 101.0)  # not b's to release
    assert b.get_driver(82).holder == "host:1:a"
    assert a.release_driver(82, "host:1:a", 102.0)
    assert b.get_driver(82) == port.DriverLease(82, "host:1:a", 102.0)
    assert b.acquire_driver(82, "host:2:b", 102.5, 15.0).holder == "host:2:b"


def test_a_live_driver_lease_is_taken_only_from_the_holder_named_as_dead(
    make_store: StoreFactory,
) -> None:
    a, b = make_store(), make_store()
    a.acquire_driver(84, "host:1:a", 100.0, 15.0)
    with pytest.raises(port.DriverBusy):
        b.acquire_driver(84, "host:2:b", 101.0, 15.0, replace="host:9:other")
    taken = b.acquire_driver(84, "host:2:b", 101.0, 15.0, replace="host:1:a")
    assert taken == port.DriverLease(84, "host:2:b", 116.0)
    assert not a.renew_driver(84, "host:1:a", 102.0, 15.0)


def test_racing_drivers_get_one_lease(make_store: StoreFactory) -> None:
    stores = [make_store() for _ in range(4)]
    gate = threading.Barrier(len(stores))
    won: list[str] = []
    busy: list[str] = []

    def take(i: int) -> None:
        gate.wait()
        try:
            won.append(stores[i].acquire_driver(86, f"host:{i}:x", 100.0, 15.0).holder)
        except port.DriverBusy as exc:
            busy.append(exc.lease.holder)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(won) == 1 and busy == won * 3
    assert stores[0].get_driver(86).holder == won[0]


# -- repeated event ids and machine-id leases (issue 8, item 1) ------------------------------


def _same_shard_pair() -> tuple[int, int]:
    """Two executions on one shard of a two-shard store: ids are unique per database."""
    first = 90
    return first, next(
        x for x in itertools.count(first + 1) if shard_of(x, 2) == shard_of(first, 2)
    )


def test_a_repeat_of_the_same_event_is_a_no_op_even_with_server_marks_or_another_time(
    store: Any,
) -> None:
    report = event(80, ev.COMMAND_HEARTBEAT, "s", command_id=1)
    store.append([started(80), report])
    # the server's clock and its `meta.stale` mark are not what the client sent
    again = dataclasses.replace(
        report, created_at=report.created_at + 5, meta={"stale": True, "stale_reason": "x"}
    )
    assert store.append([again]) == []
    assert store.append([again], expect={80: 2}) == []  # vouched, and still no error
    assert [e.event_id for e in store.load(80)].count(report.event_id) == 1


@pytest.mark.parametrize("change", ["execution", "type", "step", "content"])
def test_a_repeated_id_of_another_event_is_refused_and_nothing_is_written(
    store: Any, change: str
) -> None:
    xid, other = _same_shard_pair()
    original = event(xid, ev.COMMAND_HEARTBEAT, "s", n=1)
    store.append([started(xid), started(other), original])
    clash = {
        "execution": dataclasses.replace(original, execution_id=other),
        "type": dataclasses.replace(original, event_type=ev.CALL_DONE),
        "step": dataclasses.replace(original, step="t"),
        "content": dataclasses.replace(original, payload={"n": 2}),
    }[change]
    fresh = issued(clash.execution_id, 811)
    # unchecked, and vouched (the caller folded the log: the store does not read the ids)
    for expect in (None, {clash.execution_id: store.event_count(clash.execution_id)}):
        with pytest.raises(port.EventIdConflict) as info:
            store.append([fresh, clash], expect=expect)
        assert info.value.code == "event_id_conflict"
        assert info.value.fields["event_ids"] == [str(original.event_id)]
        assert str(clash.execution_id) in info.value.fields["execution_ids"]
    assert store.event_count(other) == 1 and store.event_count(xid) == 2
    assert store.get_command(811) is None  # the whole transaction, projections too
    assert store.load(xid)[1].payload == {"n": 1}


def test_the_same_id_twice_in_one_batch_is_stored_once_or_refused(store: Any) -> None:
    store.append([started(83)])
    beat = event(83, ev.COMMAND_HEARTBEAT, "s", n=1)
    assert [e.event_id for e in store.append([beat, beat])] == [beat.event_id]
    other = event(83, ev.COMMAND_HEARTBEAT, "s", n=1)
    with pytest.raises(port.EventIdConflict):
        store.append([other, dataclasses.replace(other, payload={"n": 2})])
    assert store.event_count(83) == 2


def test_machine_ids_are_leased_one_per_live_holder(make_store: StoreFactory) -> None:
    first, second = make_store(), make_store()
    a = first.lease_machine_id("a", 100.0, 30.0)
    b = second.lease_machine_id("b", 100.0, 30.0, owner="token-b")
    assert a != b and {a, b} <= set(port.MACHINE_IDS)
    assert first.renew_machine_id(a, "a", 120.0, 30.0)  # a: until 150
    assert not second.renew_machine_id(a, "b", 120.0, 30.0)  # not b's to renew
    assert not second.renew_machine_id(b, "b", 120.0, 30.0)  # nor b's with another token
    # b stopped renewing (lapsed at 130): its ids stay its own for RETAKE_AFTER_S
    assert second.lease_machine_id("c", 140.0, 30.0, want=b) not in {a, b}
    assert second.renew_machine_id(b, "b", 141.0, 30.0, owner="token-b")  # back: nobody took it
    retake = 171.0 + port.RETAKE_AFTER_S  # lapsed that long: another may take it
    assert first.lease_machine_id("d", retake - 1, 30.0, want=b) != b
    assert first.lease_machine_id("d2", retake, 30.0, want=b) == b
    assert not second.renew_machine_id(b, "b", retake + 1, 30.0, owner="token-b")
    [row] = [r for r in first.machine_leases() if r.machine_id == b]
    assert (row.holder, row.owner, row.leased_at) == ("d2", None, retake)


def test_a_given_back_machine_id_stays_its_owners_for_a_while(store: Any) -> None:
    a = store.lease_machine_id("a", 100.0, 30.0, owner="token-a")
    assert store.release_machine_id(a, "a", 110.0, owner="token-a")
    assert not store.release_machine_id(a, "a", 111.0, owner="token-a")  # given back already
    [row] = store.machine_leases()
    assert (row.machine_id, row.expires_at, row.owner) == (a, 110.0, "token-a")
    assert store.lease_machine_id("b", 120.0, 30.0, owner="token-b", want=a) != a
    assert store.lease_machine_id("a2", 121.0, 30.0, owner="token-a") == a  # its own again


def test_leasing_every_machine_id_then_one_more_is_a_clear_error(store: Any) -> None:
    for n in port.MACHINE_IDS:
        store.lease_machine_id(f"h{n}", 1.0, 60.0)
    with pytest.raises(port.MachineIdsExhausted) as info:
        store.lease_machine_id("late", 2.0, 60.0, owner="other")
    assert info.value.code == "machine_ids_exhausted"
    with pytest.raises(port.MachineIdsExhausted):  # lapsed, not yet for RETAKE_AFTER_S
        store.lease_machine_id("late", 61.5, 60.0, owner="other")
    assert store.lease_machine_id("late", 61.0 + port.RETAKE_AFTER_S, 60.0, owner="other") == 1


def test_processes_opening_a_new_sqlite_file_at_once_all_migrate_it(tmp_path: Path) -> None:
    """Two `milepost run` in one folder, the first time: both create the default file."""
    failures: list[str] = []
    for round_ in range(20):  # the race is won by timing: many rounds make it certain
        path = tmp_path / f"new{round_}.db"
        gate = threading.Barrier(4)

        def open_it(path: Path = path, gate: threading.Barrier = gate) -> None:
            gate.wait()
            try:
                SQLiteStore(path).close()
            except sqlite3.Error as exc:
                failures.append(repr(exc))

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []
    assert SQLiteStore(tmp_path / "new0.db").schema_version() == len(migrations.scripts("sqlite"))


def test_a_locked_sqlite_file_is_store_unavailable_as_on_postgresql(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "locked.db")
    try:
        with store.read() as conn:
            conn.execute("PRAGMA busy_timeout=50")  # the default waits 10 s for the lock
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # another process holds the file
        with pytest.raises(port.StoreUnavailable, match="database is locked") as caught:
            store.append([started(77)])
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        other.close()
        store.append([started(77)])  # the lock is gone: the same call goes through
        assert store.get_execution(77) is not None
    finally:
        store.close()
