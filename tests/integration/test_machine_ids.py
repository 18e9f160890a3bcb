"""Leased machine ids (issue 8, item 1): one per live process, a lost lease replaced."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from milepost.engine import machine
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.machine import LeasedIds, MachineIdLost
from milepost.ids import Snowflake, machine_of
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from tests.shared import wait_for_async

HELLO = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: m, path: tests/m}
workflow:
  - step: start
    tool: {kind: noop}
"""


def test_a_lost_lease_is_replaced_before_another_id_is_made(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    now = [1000.0]
    ids = LeasedIds(store, lambda: now[0], holder="a", ttl=30.0)
    first = ids.machine_id
    assert machine_of(ids()) == first
    now[0] += 10
    assert ids.renew() and ids.machine_id == first
    now[0] += 100  # stalled past its lease, and another process took the id meanwhile
    assert store.lease_machine_id("b", now[0], 30.0, owner="other", want=first) == first
    assert not ids.renew()
    assert ids.machine_id != first and machine_of(ids()) == ids.machine_id
    ids.release()
    leases = {r.machine_id: (r.holder, r.expires_at > now[0]) for r in store.machine_leases()}
    assert leases == {first: ("b", True), ids.machine_id: ("a", False)}


def test_two_embedded_engines_on_one_file_mint_on_distinct_leased_ids(tmp_path: Path) -> None:
    playbook = load.load_text(HELLO)

    async def scenario() -> None:
        stores = [SQLiteStore(tmp_path / "m.db") for _ in range(2)]
        engines = [EmbeddedEngine(store, concurrency=1) for store in stores]
        async with engines[0] as one, engines[1] as two:
            states = [await one.run(playbook, HELLO), await two.run(playbook, HELLO)]
            assert [s.status for s in states] == ["COMPLETED", "COMPLETED"]
            machines = [
                {machine_of(e.event_id) for e in s.load(x.execution_id)}
                for s, x in zip(stores, states, strict=True)
            ]
            assert [len(m) for m in machines] == [1, 1] and machines[0] != machines[1]
            assert len([r for r in stores[0].machine_leases() if r.expires_at > time.time()]) == 2
        assert [r for r in stores[0].machine_leases() if r.expires_at > time.time()] == []
        for store in stores:
            store.close()

    asyncio.run(scenario())


class FlakyLeases(SQLiteStore):
    """A machine_lease table behind a busy SQLite file: some calls fail as "database is
    locked" (`sqlite3.OperationalError`, not a MilepostError)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.renewals = 0
        self.fail_renewals = 0
        self.fail_leases = 0
        self.fail_release = False

    def renew_machine_id(
        self, machine_id: int, holder: str, now: float, ttl: float, *, owner: str | None = None
    ) -> bool:
        self.renewals += 1
        if self.fail_renewals:
            self.fail_renewals -= 1
            raise sqlite3.OperationalError("database is locked")
        return super().renew_machine_id(machine_id, holder, now, ttl, owner=owner)

    def lease_machine_id(
        self,
        holder: str,
        now: float,
        ttl: float,
        *,
        owner: str | None = None,
        want: int | None = None,
    ) -> int:
        if self.fail_leases:
            self.fail_leases -= 1
            raise sqlite3.OperationalError("database is locked")
        return super().lease_machine_id(holder, now, ttl, owner=owner, want=want)

    def release_machine_id(
        self, machine_id: int, holder: str, now: float, *, owner: str | None = None
    ) -> bool:
        if self.fail_release:
            raise sqlite3.OperationalError("database is locked")
        return super().release_machine_id(machine_id, holder, now, owner=owner)


def test_the_embedded_engine_keeps_renewing_after_a_locked_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machine, "RENEW_EVERY_S", 0.01)
    store = FlakyLeases(tmp_path / "m.db")
    store.fail_renewals = 2

    async def scenario() -> None:
        async with EmbeddedEngine(store, concurrency=1):
            await wait_for_async(
                lambda: store.renewals >= 4, "four renewals", timeout=20
            )  # past the failures: the task lives on

    asyncio.run(scenario())
    store.close()


def test_a_release_that_fails_on_a_locked_database_is_only_logged(tmp_path: Path) -> None:
    store = FlakyLeases(tmp_path / "m.db")
    ids = LeasedIds(store, lambda: 1000.0, holder="a")
    store.fail_release = True
    ids.release()  # the lease lapses on its own
    store.close()


def test_an_id_lost_while_no_new_lease_can_be_had_makes_no_more_ids(tmp_path: Path) -> None:
    store = FlakyLeases(tmp_path / "m.db")
    now = [1000.0]
    ids = LeasedIds(store, lambda: now[0], holder="a", ttl=30.0)
    first = ids.machine_id
    now[0] += 100  # stalled past its lease, and another process took the id meanwhile
    assert store.lease_machine_id("b", now[0], 30.0, owner="other", want=first) == first
    store.fail_leases = 1
    with pytest.raises(sqlite3.OperationalError):
        ids.renew()
    with pytest.raises(MachineIdLost) as info:
        ids()  # another process mints on `first` now
    assert info.value.code == "machine_id_lost"
    assert not ids.renew()  # the next round leases a new id
    assert ids.machine_id != first and machine_of(ids()) == ids.machine_id
    store.close()


def test_the_engine_service_does_not_lock_a_leased_generator_twice(tmp_path: Path) -> None:
    from milepost.engine.lifecycle import Lifecycle
    from milepost.engine.orchestrator import Orchestrator

    store = SQLiteStore(tmp_path / "m.db")
    leased = LeasedIds(store, time.time, holder="server")
    orchestrator = Orchestrator(store, new_id=leased)
    Lifecycle(store, orchestrator)
    assert orchestrator.new_id is leased
    plain = Orchestrator(store)
    Lifecycle(store, plain)
    assert not isinstance(plain.new_id, Snowflake)  # a plain snowflake is wrapped in a lock
    store.close()
