"""The workers registry on every store: a check-in registers a process once and moves its
last sight after; lost rows are marked once and forgotten when asked; several processes
share one registry; the engine reads live and lost, by pool, with the commands each name
holds."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from milepost.engine import worker_pools, workers
from milepost.store import port
from tests.contract.test_pools import issued_in
from tests.contract.test_store import StoreFactory, new_id, started


def row(
    key: str,
    name: str,
    now: float,
    pool: str = "default",
    ttl: float = 30.0,
    kind: str = workers.WORKER,
    pid: int | None = 7,
) -> port.WorkerRow:
    return port.WorkerRow(key, name, pool, kind, "host-a", pid, "0.1.0", now, now, ttl)


def test_a_check_in_registers_a_process_once_and_moves_its_last_sight(store: Any) -> None:
    assert store.list_workers() == []
    first = store.record_worker(row("w/1", "w", 100.0))
    assert first == row("w/1", "w", 100.0)
    again = store.record_worker(row("w/1", "w", 110.0, pid=None))
    assert (again.started_at, again.last_seen, again.pid) == (100.0, 110.0, None)
    store.record_worker(row("a/2", "a", 105.0, pool="gpu", kind=workers.EMBEDDED))
    assert [(r.name, r.pool, r.kind) for r in store.list_workers()] == [
        ("a", "gpu", "embedded"),
        ("w", "default", "worker"),
    ]
    assert store.list_workers()[1] == again


def test_lost_workers_are_marked_once_and_a_check_in_makes_them_live(store: Any) -> None:
    store.record_worker(row("w/1", "w", 100.0, ttl=10.0))
    store.record_worker(row("v/1", "v", 100.0, ttl=60.0))
    assert store.mark_lost_workers(109.0) == []
    [lost] = store.mark_lost_workers(110.0)  # seen at 100 with a ttl of 10: lost at 110
    assert (lost.name, lost.lost_at) == ("w", None)
    assert store.mark_lost_workers(120.0) == []  # said once
    marked = {r.name: r.lost_at for r in store.list_workers()}
    assert marked == {"v": None, "w": 110.0}
    back = store.record_worker(row("w/1", "w", 130.0, ttl=10.0))
    assert (back.lost_at, back.started_at) == (None, 100.0)


def test_rows_are_forgotten_by_key_or_when_seen_long_ago(make_store: StoreFactory) -> None:
    first, second = make_store(), make_store()  # two processes on one database
    first.record_worker(row("w/1", "w", 100.0))
    second.record_worker(row("v/1", "v", 200.0))
    second.record_worker(row("u/1", "u", 300.0))
    assert [r.name for r in first.list_workers()] == ["u", "v", "w"]
    assert second.forget_workers(worker_key="u/1") == 1
    assert first.forget_workers(worker_key="u/1") == 0
    assert first.forget_workers(seen_before=200.0) == 1  # w, seen at 100
    assert [r.name for r in second.list_workers()] == ["v"]
    assert first.forget_workers() == 0


def test_the_engine_reads_status_pools_and_the_commands_each_name_holds(store: Any) -> None:
    store.append(
        [
            started(51),
            issued_in(51, 51_001, "default"),
            issued_in(51, 51_002, "gpu"),
            issued_in(51, 51_003, "default"),
        ]
    )
    workers.check_in(store, 100.0, workers.CheckIn("w/1", "w", ttl=30.0))
    workers.check_in(store, 100.0, workers.CheckIn("g/1", "g", "gpu", ttl=5.0))
    store.claim_next("w", 101.0, 30.0, 1, pool="default", new_id=new_id)
    store.claim_next("g", 101.0, 30.0, 1, pool="gpu", new_id=new_id)
    listed = {w.row.name: w for w in workers.workers(store, 106.0)}
    assert {n: w.status for n, w in listed.items()} == {"g": "lost", "w": "live"}
    assert [c.command_id for c in listed["w"].running] == [51_001]
    assert [c.step for c in listed["g"].running] == ["s51002"]  # held until its lease ends
    assert [w.row.name for w in workers.workers(store, 106.0, pool="gpu")] == ["g"]
    assert [w.row.name for w in workers.workers(store, 106.0, status_="live")] == ["w"]
    assert workers.workers(store, 106.0, pool="gpu", status_="live") == []
    assert workers.live_pools(store, 106.0) == {"default"}
    assert [m.pool for m in worker_pools.missing(store, 106.0)] == []  # nothing queued in gpu
    [lost] = workers.notice_lost(store, 106.0)
    assert lost.name == "g"


def test_lost_workers_seen_a_day_ago_are_forgotten_by_the_tick(store: Any) -> None:
    workers.check_in(store, 100.0, workers.CheckIn("w/1", "w", ttl=30.0))
    workers.notice_lost(store, 200.0)
    assert [r.lost_at for r in store.list_workers()] == [200.0]
    workers.notice_lost(store, 100.0 + workers.FORGET_AFTER + 1)
    assert store.list_workers() == []


OWNERS = ["token-a", "token-b", None]
"""Two tokens, and a process on the database itself (the embedded engine)."""
CHECKS = hs.lists(
    hs.one_of(
        hs.tuples(
            hs.just("in"),
            hs.sampled_from(OWNERS),
            hs.sampled_from(["k1", "k2", "k3"]),
            hs.sampled_from(["n1", "n2"]),
            hs.sampled_from([5.0, 30.0]),
        ),
        hs.tuples(hs.just("out"), hs.sampled_from(OWNERS), hs.sampled_from(["k1", "k2", "k3"])),
        hs.tuples(hs.just("wait"), hs.sampled_from([1.0, 10.0, 40.0])),
    ),
    max_size=20,
)


def test_no_check_in_of_another_token_changes_or_hides_a_live_worker(store: Any) -> None:
    """Issue 33, item 8, the class: whatever check-ins and clean stops several tokens make
    under any names and keys, a live worker's row is changed or removed only by its own
    token (or by the database's own processes), so a live worker is never shown lost
    because of someone else; and every live name has one token."""
    examples = iter(range(10**6))

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(CHECKS)
    def checks(steps: list[tuple[Any, ...]]) -> None:
        tag = f"x{next(examples)}-"  # rows of earlier examples stay: names of their own
        now = 1000.0 + 10**5 * int(tag[1:-1])
        for step in steps:
            before = {r.worker_key: r for r in store.list_workers() if r.live(now)}
            if step[0] == "wait":
                now += step[1]
                continue
            owner, key = step[1], tag + step[2]
            who = workers.CheckIn(key, tag + (step[3] if step[0] == "in" else ""), owner=owner)
            try:
                if step[0] == "in":
                    who = workers.CheckIn(key, who.name, ttl=step[4], owner=owner)
                    workers.check_in(store, now, who)
                else:
                    workers.check_out(store, now, who, "holder", None)
            except port.WorkerNameTaken:
                assert owner is not None, "the database's own processes are never refused"
            after = {r.worker_key: r for r in store.list_workers()}
            for k, row in before.items():
                if (row.owner or "") != (owner or "") and owner is not None:
                    assert after.get(k) == row, f"{k} of {row.owner} changed by {owner}"
            live = [r for r in after.values() if r.live(now) and r.name.startswith(tag)]
            for name in {r.name for r in live}:
                holders = {r.owner for r in live if r.name == name} - {None}
                assert len(holders) <= 1, f"{name} live under {holders}"

    checks()
