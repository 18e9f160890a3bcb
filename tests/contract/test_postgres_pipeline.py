"""PostgreSQL's append is one pipeline: how many times it waits for the server, and what a
failure inside it leaves behind (nothing, and a connection the pool can lend again)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from psycopg import _pipeline_base

from milepost.core import events as ev
from milepost.errors import ConcurrencyConflict
from milepost.store import port, sql
from milepost.store.postgres import PostgresStore
from tests.contract.test_store import event, issued, new_id, report, started
from tests.pg import PgDatabases


@pytest.fixture
def store(pg: PgDatabases) -> Iterator[PostgresStore]:
    url = pg.create()
    opened = PostgresStore(url, min_size=1, max_size=1)  # one connection: every call reuses it
    try:
        yield opened
    finally:
        opened.close()
        pg.drop(url)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The text of every statement executed through a connection."""
    texts: list[bytes] = []
    real = psycopg.Connection.execute

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        texts.append(query if isinstance(query, bytes) else str(query).encode())
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    return texts


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A Sync is sent for every time the client waits for the server's answers."""
    sent: list[int] = []
    real = _pipeline_base.BasePipeline._enqueue_sync

    def counted(self: Any) -> None:
        sent.append(1)
        real(self)

    monkeypatch.setattr(_pipeline_base.BasePipeline, "_enqueue_sync", counted)
    return sent


def test_a_vouched_append_with_its_claim_is_one_round_trip(
    store: PostgresStore, syncs: list[int], sent: list[bytes]
) -> None:
    store.append([started(41), issued(41, 411)])
    syncs.clear()
    sent.clear()
    stored, claimed = store.append_and_claim(
        [event(41, ev.STEP_ENTER, "t", run=1), issued(41, 412, "t")],
        port.ClaimRequest("w", 1.0, 5.0, 5, new_id=new_id),
        expect={41: 2},
    )
    assert len(stored) == 2 and sorted(row.command_id for row, _ in claimed) == [411, 412]
    # psycopg's transaction() inside a pipeline nests two pipeline blocks around itself,
    # each ending in a Sync: three waits for the server where one does
    assert len(syncs) == 1
    # nothing is read before the end: the pipeline's implicit transaction, which its Sync
    # commits, needs no BEGIN and COMMIT of its own
    assert not {b"BEGIN", b"COMMIT"} & set(sent)


def test_an_append_that_must_read_before_committing_waits_twice(
    store: PostgresStore, syncs: list[int], sent: list[bytes]
) -> None:
    store.append([started(42)])
    syncs.clear()
    store.append([event(42, ev.STEP_ENTER, "t", run=1)])  # not vouched: counted before COMMIT
    assert len(syncs) == 2
    assert sent[0] == b"BEGIN" and sent[-1] == b"COMMIT"  # a Sync inside: its own transaction


def test_a_failure_in_python_mid_append_writes_nothing_and_frees_the_connection(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch, sent: list[bytes]
) -> None:
    store.append([started(43), issued(43, 431)])
    sent.clear()

    # the events and their projections are queued (sent, not committed) when this raises
    monkeypatch.setattr(PostgresStore, "claim_queued", _claim_fails)
    with pytest.raises(RuntimeError):
        store.append_and_claim(
            [event(43, ev.STEP_ENTER, "t", run=1), issued(43, 432, "t")],
            port.ClaimRequest("w", 1.0, 5.0, 5, new_id=new_id),
            expect={43: 2},
        )
    # the implicit transaction's Sync would have committed what was sent: it was made to fail
    # (then an empty transaction is rolled back, for psycopg to forget what it prepared)
    abandoned = next(i for i, text in enumerate(sent) if b"abandoned" in text)
    assert b"BEGIN" not in sent[:abandoned]
    monkeypatch.undo()
    assert [e.seq for e in store.load(43)] == [1, 2]
    assert store.get_command(432) is None
    # the pool's one connection was handed back idle: the next append commits on it
    stored = store.append([event(43, ev.STEP_ENTER, "t", run=1)])
    assert [e.seq for e in stored] == [3]
    with store.read() as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_statement_the_server_refuses_rolls_the_whole_append_back(store: PostgresStore) -> None:
    store.append([started(44), issued(44, 441)])
    taken = issued(44, 441)  # a second command row with the same id: the insert fails
    with pytest.raises(Exception) as refused:
        store.append_and_claim(
            [event(44, ev.STEP_ENTER, "t", run=1), taken],
            port.ClaimRequest("w", 1.0, 5.0, 5, new_id=new_id),
            expect={44: 2},
        )
    assert not isinstance(refused.value, sql.RepeatedId)
    assert [e.seq for e in store.load(44)] == [1, 2]
    assert store.get_command(441).status == port.COMMAND_QUEUED  # its claim went with it
    assert [e.seq for e in store.append([event(44, ev.STEP_ENTER, "t", run=1)])] == [3]


def test_one_statement_takes_the_locks_of_every_log_of_a_batch(store: PostgresStore) -> None:
    other = psycopg.connect(store.url, autocommit=True)
    try:
        with store.txn() as conn:
            store.lock_keys(conn, sql.NS_APPEND, [-7, 5, 9])
            held = [
                other.execute(
                    "SELECT pg_try_advisory_lock(%s::int4, %s::int4)", (sql.NS_APPEND, key)
                ).fetchone()[0]
                for key in (-7, 5, 9, 11)
            ]
        assert held == [False, False, False, True]  # the batch's keys are taken, no other
        assert other.execute(
            "SELECT pg_try_advisory_lock(%s::int4, 5)", (sql.NS_APPEND,)
        ).fetchone()[0]
    finally:
        other.close()


def test_a_new_runs_first_append_takes_no_log_lock_and_cannot_take_a_used_seq(
    store: PostgresStore, sent: list[bytes]
) -> None:
    # nobody else can write to the log of a run whose start is not committed: the lock
    # statement is left out; a caller wrong about the log being new still writes nothing
    store.append([started(45), issued(45, 451)], expect={45: 0})
    assert not any(b"advisory" in text for text in sent)
    assert [e.seq for e in store.load(45)] == [1, 2]
    other = PostgresStore(store.url, min_size=1, max_size=1)  # another process: no cache
    try:
        with pytest.raises(port.LogMoved):  # seq 1 refused, then the log read: it moved
            other.append([event(45, ev.STEP_ENTER, "t", run=1)], expect={45: 0})
    finally:
        other.close()
    assert [e.seq for e in store.load(45)] == [1, 2]


def test_a_statement_prepared_in_a_pipeline_the_server_aborted_is_not_used_after(
    store: PostgresStore,
) -> None:
    # psycopg prepares a statement on its sixth execution and counts it as prepared once its
    # Parse is queued. In a pipeline whose earlier statement fails, the server skips that
    # Parse: the connection would answer "prepared statement _pg3_N does not exist" for the
    # statement ever after (every later report of a W3 server bench on it, each a 500)
    seen, claimed = _five_inserts_then_a_claim_there(store, 46)
    assert claimed == [461]
    # numbered from what this store committed: the claim took that seq, the event insert
    # fails, and the sixth insert of a command row (prepared now) never reaches the server
    seen = store.append([issued(46, 466)], expect={46: seen})[-1].seq
    for cid in range(467, 470):  # the same statement again, on this store's connection
        seen = store.append([issued(46, cid)], expect={46: seen})[-1].seq
    assert [e.seq for e in store.load(46)] == list(range(1, 12))  # the start, 9 issued, a claim
    assert {c.command_id for c in store.open_commands(46)} == set(range(461, 470))


def test_a_failure_in_python_after_a_refusal_leaves_no_statement_prepared_in_name_only(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the same, when Python fails after the refused statement: psycopg reports the server's
    # refusal only in its log then, and the Python error is what the append raises
    seen, _ = _five_inserts_then_a_claim_there(store, 47)
    monkeypatch.setattr(PostgresStore, "claim_queued", _claim_fails)
    with pytest.raises(RuntimeError):
        store.append_and_claim(
            [issued(47, 476)], port.ClaimRequest("w", 1.0, 5.0, 5, new_id=new_id), expect={47: seen}
        )
    monkeypatch.undo()
    seen = store.load(47)[-1].seq
    stored = store.append([issued(47, 477)], expect={47: seen})  # the command row's insert
    assert [e.seq for e in stored] == [seen + 1]


def _five_inserts_then_a_claim_there(store: PostgresStore, xid: int) -> tuple[int, list[int]]:
    """A run whose command row was inserted five times (counted by psycopg, not prepared),
    then claimed by another process: the seq this store would number next is taken.
    Returns the seq this store committed last, and the commands the other one claimed."""
    store.append([started(xid)])
    seen = 1
    for cid in range(xid * 10 + 1, xid * 10 + 6):
        seen = store.append([issued(xid, cid)], expect={xid: seen})[-1].seq
    other = PostgresStore(store.url, min_size=1, max_size=1)  # another worker's claim
    try:
        claimed = other.claim_next("w", 1.0, 30.0, 1, new_id=new_id)
    finally:
        other.close()
    return seen, [row.command_id for row, _ in claimed]


def _claim_fails(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("the claim could not be queued")


_xids = iter(range(4_700, 1_000_000))
_REFUSALS = (port.LogMoved, port.ClaimMoved, ConcurrencyConflict)
"""What the server may answer a call here: a log or a claim that moved, a row already there."""


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    hs.lists(
        hs.sampled_from(
            [
                "issue",
                "issue",
                "issue_again",
                "claim_there",
                "claim_there",
                "decide_there",
                "report_moved",
                "report_live",
            ]
        ),
        min_size=4,
        max_size=24,
    )
)
def test_no_refusal_leaves_a_connection_that_fails_later_calls(
    store: PostgresStore, ops: list[str]
) -> None:
    # the class of the prepared statement above: whatever the server refused (a seq
    # taken, a claim moved, a row already there), the store's one connection answers every
    # later call, and nothing of a refused call is in the log. A fresh connection each
    # example, whose statements are prepared on their second run, not their sixth: many
    # turns for a refusal to meet a statement being prepared
    mine = PostgresStore(store.url, min_size=1, max_size=1, migrate=False)
    other = PostgresStore(store.url, min_size=1, max_size=1, migrate=False)  # another process
    try:
        with mine.read() as conn:
            conn.prepare_threshold = 1
        _refusals(mine, other, ops)
    finally:
        mine.close()
        other.close()


def _refusals(store: PostgresStore, other: PostgresStore, ops: list[str]) -> None:
    xid = next(_xids)
    seen = store.append([started(xid)])[-1].seq
    cids = iter(range(xid * 100, xid * 100 + 99))
    issued_ids: list[int] = []
    for op in ops:
        before = len(other.load(xid))
        try:
            if op == "issue":  # numbered from what this store committed last
                cid = next(cids)
                seen = store.append([issued(xid, cid)], expect={xid: seen})[-1].seq
                issued_ids.append(cid)
            elif op == "issue_again" and issued_ids:  # its command row is there: refused
                store.append([issued(xid, issued_ids[-1])], expect={xid: seen})
            elif op == "claim_there":  # another process's claim: this store's seq is stale
                queued = [
                    r.command_id
                    for r in other.open_commands(xid)
                    if r.status == port.COMMAND_QUEUED
                ]
                if queued:
                    other.claim(queued[0], "w", 1.0, 30.0, new_id=new_id)
            elif op == "decide_there":  # another process's decision: LogMoved here
                other.append([event(xid, ev.STEP_ENTER, "t", run=1)])
            elif op in ("report_moved", "report_live") and issued_ids:
                live = {
                    row.command_id: row.epoch
                    for row in other.open_commands(xid)
                    if row.status == port.COMMAND_CLAIMED
                }
                cid, epoch = next(iter(live.items()), (issued_ids[0], 0))
                epoch += 0 if op == "report_live" else 7
                seen = store.append([report(xid, cid, epoch)], check_claims=True)[-1].seq
        except _REFUSALS:
            seen = store.load(xid)[-1].seq  # as a caller that reads the log again
            assert len(other.load(xid)) == before  # nothing of the refused call written
    # the connection still answers every statement an append makes
    seen = store.load(xid)[-1].seq
    stored = store.append([issued(xid, next(cids))], expect={xid: seen})
    assert [e.seq for e in store.load(xid)] == list(range(1, stored[-1].seq + 1))
