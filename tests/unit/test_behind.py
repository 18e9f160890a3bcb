"""Appending behind a run another process drives (`engine.behind`), the one loop under
`milepost cancel`, `retry`, `skip` and `approve` of a run `milepost run` drives: what core
builds on the log as read goes in only if the log is still there, else it is read and
built again, a bounded number of times."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from milepost.core import cancellation
from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine import behind
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.orchestrator import Orchestrator
from milepost.errors import ConcurrencyConflict
from milepost.playbook import load
from milepost.store import port
from milepost.store.memory import MemoryStore

FLOW = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: behind, path: tests/behind}
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
    """)


class World:
    def __init__(self) -> None:
        self.now = 1000.0
        self.store = MemoryStore()
        self.driver = Lifecycle(
            self.store, Orchestrator(self.store, clock=lambda: self.now, machine_id=1)
        )
        pb = load.load_text(FLOW)
        _, version = self.driver.register(FLOW, pb)
        self.xid, _ = self.driver.start(pb, version, {})
        # another process: its own orchestrator over the same log
        self.other = Orchestrator(self.store, clock=lambda: self.now, machine_id=2)
        self.reads: list[int] = []

    def cancel(self, state: st.ExecutionState) -> list[ev.Event]:
        self.reads.append(state.last_seq)
        if state.cancel_requested:
            return []
        return [cancellation.request(self.other.new_id(), self.xid, self.now, "user:bob")]

    def refuse(self, times: int, error: type[ConcurrencyConflict]) -> None:
        """The store's next `times` appends raise `error` (another writer moved first)."""
        real: Callable[..., Any] = self.store.append
        left = [times]

        def append(*args: Any, **kw: Any) -> Any:
            if left[0] > 0:
                left[0] -= 1
                raise error("moved", execution_ids=[])
            return real(*args, **kw)

        self.store.append = append  # type: ignore[method-assign]


def requests(world: World) -> list[ev.Event]:
    return [e for e in world.store.load(world.xid) if e.event_type == ev.EXECUTION_CANCEL_REQUESTED]


def test_what_core_builds_goes_in_behind_the_log_as_read() -> None:
    world = World()
    before = world.store.load(world.xid)[-1].seq
    appended = behind.append(world.store, world.other, world.xid, world.cancel)
    assert appended.read.last_seq == before
    assert [e.event_id for e in appended.events] == [e.event_id for e in requests(world)]
    assert requests(world)[0].payload == {"actor": "user:bob"}
    # the driver decides on its next look
    world.driver.process(also=[world.xid], refresh=True)
    assert world.driver.read(world.xid, lambda s, _: s.cancel_requested)


def test_nothing_built_is_nothing_appended() -> None:
    world = World()
    behind.append(world.store, world.other, world.xid, world.cancel)
    again = behind.append(world.store, world.other, world.xid, world.cancel)
    assert again.events == []
    assert again.read.cancel_requested
    assert len(requests(world)) == 1


@pytest.mark.parametrize("moved", [port.LogMoved, port.ClaimMoved])
def test_a_log_that_moved_is_read_and_built_again(moved: type[ConcurrencyConflict]) -> None:
    world = World()
    world.refuse(2, moved)
    behind.append(world.store, world.other, world.xid, world.cancel)
    assert len(world.reads) == 3  # built on a fresh read each time
    assert len(requests(world)) == 1


def test_a_log_that_keeps_moving_is_a_conflict_naming_what_to_do() -> None:
    world = World()
    world.refuse(behind.APPEND_TRIES, port.LogMoved)
    with pytest.raises(ConcurrencyConflict) as raised:
        behind.append(world.store, world.other, world.xid, world.cancel, again="cancel again")
    assert raised.value.message == (f"the log of execution {world.xid} kept moving; cancel again")
    assert len(world.reads) == behind.APPEND_TRIES
    assert requests(world) == []
    # the next try goes in
    behind.append(world.store, world.other, world.xid, world.cancel)
    assert len(requests(world)) == 1
