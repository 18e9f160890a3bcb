"""Pools on every store (DSL 10.6): a claim for one pool never takes another pool's
commands, by any claim path, from several processes at once; the rows say their pool
(who serves a pool: tests/contract/test_workers.py)."""

from __future__ import annotations

import threading
from typing import Any

from milepost.core import events as ev
from milepost.store import port, projection
from tests.contract.test_store import StoreFactory, event, new_id, started

POOLS = ("default", "gpu", "cpu.big")


def issued_in(xid: int, command_id: int, pool: str) -> ev.Event:
    extra = {} if pool == "default" else {"pool": pool}  # as decide writes it
    return event(
        xid,
        ev.COMMAND_ISSUED,
        f"s{command_id}",
        command_id=command_id,
        run=1,
        index=-1,
        attempt=1,
        idempotency_key=f"{command_id:064d}",
        **extra,
    )


def _seed(store: Any, xid: int, per_pool: int) -> dict[int, str]:
    """`per_pool` queued commands of each pool, interleaved by age; command id -> pool."""
    pools = {xid * 1000 + i: POOLS[i % len(POOLS)] for i in range(per_pool * len(POOLS))}
    store.append([started(xid)] + [issued_in(xid, cid, pool) for cid, pool in pools.items()])
    return pools


def test_a_claim_for_a_pool_takes_only_that_pool_s_commands_by_every_path(store: Any) -> None:
    pools = _seed(store, 41, 3)
    rows = store.get_commands(list(pools))
    assert {cid: row.pool for cid, row in rows.items()} == pools
    assert {row.pool for row in store.open_commands(41)} == set(POOLS)
    # the polling claim
    taken = store.claim_next("w-gpu", 200.0, 30.0, 10, pool="gpu", new_id=new_id)
    assert sorted(c.command_id for c, _ in taken) == sorted(
        c for c, p in pools.items() if p == "gpu"
    )
    assert {c.pool for c, _ in taken} == {"gpu"}
    assert store.claim_next("w-gpu", 200.0, 30.0, 10, pool="gpu", new_id=new_id) == []
    # the claim a report makes in its own transaction
    report = event(41, ev.STEP_ENTER, "x", run=1)
    _, claimed = store.append_and_claim(
        [report], port.ClaimRequest("w-big", 200.0, 30.0, 10, "cpu.big", new_id=new_id)
    )
    assert {c.pool for c, _ in claimed} == {"cpu.big"} and len(claimed) == 3
    # a pool nobody issued to gets nothing; `None` (an embedded engine) takes what is left
    assert store.claim_next("w", 200.0, 30.0, 10, pool="tpu", new_id=new_id) == []
    rest = store.claim_next("w", 200.0, 30.0, 10, pool=None, new_id=new_id)
    assert {c.pool for c, _ in rest} == {"default"} and len(rest) == 3
    # the rows rebuilt from the log keep their pools
    rebuilt = projection.rebuild(store.load(41)).commands
    assert {cid: rebuilt[cid].pool for cid in pools} == pools


def test_racing_claimers_of_different_pools_never_take_each_other_s_commands(
    make_store: StoreFactory,
) -> None:
    pools = _seed(make_store(), 42, 20)
    claimers = [(pool, make_store()) for pool in POOLS for _ in range(2)]  # two "processes" each
    got: dict[str, list[tuple[str, int]]] = {pool: [] for pool in POOLS}
    barrier = threading.Barrier(len(claimers))

    def claim(index: int, pool: str, store: Any) -> None:
        barrier.wait()
        while batch := store.claim_next(f"w{index}", 200.0, 30.0, 3, pool=pool, new_id=new_id):
            got[pool].extend((c.pool, c.command_id) for c, _ in batch)

    threads = [
        threading.Thread(target=claim, args=(i, pool, store))
        for i, (pool, store) in enumerate(claimers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for pool in POOLS:
        ids = [cid for _, cid in got[pool]]
        assert {p for p, _ in got[pool]} == {pool}
        assert sorted(ids) == sorted(c for c, p in pools.items() if p == pool)  # each once
