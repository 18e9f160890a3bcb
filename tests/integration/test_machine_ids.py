"""Leased machine ids (issue 8, item 1): one per live process, a lost lease replaced."""

from __future__ import annotations

import asyncio
from pathlib import Path

from milepost.core.ids import MAX_MACHINE, SEQUENCE_BITS
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.machine import LeasedIds
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore

HELLO = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: m, path: tests/m}
workflow:
  - step: start
    tool: {kind: noop}
"""


def _machine_of(event_id: int) -> int:
    return (event_id >> SEQUENCE_BITS) & MAX_MACHINE


def test_a_lost_lease_is_replaced_before_another_id_is_made(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    now = [1000.0]
    ids = LeasedIds(store, lambda: now[0], holder="a", ttl=30.0)
    first = ids.machine_id
    assert _machine_of(ids()) == first
    now[0] += 10
    assert ids.renew() and ids.machine_id == first
    now[0] += 100  # stalled past its lease, and another process took the id meanwhile
    assert store.lease_machine_id("b", now[0], 30.0) == first
    assert not ids.renew()
    assert ids.machine_id != first and _machine_of(ids()) == ids.machine_id
    ids.release()
    assert store._query("SELECT holder FROM machine_lease", ()) == [("b",)]


def test_two_embedded_engines_on_one_file_mint_on_distinct_leased_ids(tmp_path: Path) -> None:
    playbook = load.load_text(HELLO)

    async def scenario() -> None:
        stores = [SQLiteStore(tmp_path / "m.db") for _ in range(2)]
        engines = [EmbeddedEngine(store, concurrency=1) for store in stores]
        async with engines[0] as one, engines[1] as two:
            states = [await one.run(playbook, HELLO), await two.run(playbook, HELLO)]
            assert [s.status for s in states] == ["COMPLETED", "COMPLETED"]
            machines = [{_machine_of(e.event_id) for e in s.load(x.execution_id)}
                        for s, x in zip(stores, states, strict=True)]  # fmt: skip
            assert [len(m) for m in machines] == [1, 1] and machines[0] != machines[1]
            assert stores[0]._query("SELECT count(*) FROM machine_lease", ())[0][0] == 2
        assert stores[0]._query("SELECT count(*) FROM machine_lease", ())[0][0] == 0
        for store in stores:
            store.close()

    asyncio.run(scenario())
