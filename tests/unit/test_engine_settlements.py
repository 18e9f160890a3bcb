"""The engine's own settlements never overwrite a claim, report or expiry that came after
the engine read the command rows (issue 33, found by `milepost verify` on PostgreSQL: a
cancelled run's queued command was claimed between the engine's read and its append, and
its `command.failed` at epoch 0 went in over the live claim: the worker ran a step the log
says was cancelled before anyone claimed it).

The class: every path that writes a `command.failed` the engine built from rows it read (a
cancel's queued commands, an abandoned attempt, a retry or skip of a live one, a stall, the
default timeout, a run torn down after an engine error) races whatever a worker or the
reconciler commits in between. A property over interleavings, with a worker's move slipped
in right after the engine's read: the log stays fenced (`verify.checks.fenced`) and ends
once, and a run the engine was asked to settle still ends.
"""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as hs

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine import actions
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.orchestrator import Orchestrator
from milepost.errors import MilepostError
from milepost.playbook import load
from milepost.store import port
from milepost.store.memory import MemoryStore
from milepost.verify import checks
from tests.reports import claim_completed

LOOP = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: settle, path: tests/settle}
    executor: {spec: {cancel_grace: 5s, stall_after: 20s}}
    workflow:
      - step: start
        loop: {in: "{{ [1, 2, 3] }}", iterator: n, mode: parallel}
        tool: {kind: python, code: "result = n"}
    """)
LEASE_S = 30.0

WORKER = ["claim", "report", "release"]
ENGINE = ["cancel", "abandon", "retry", "skip", "tick"]
OPS = hs.lists(
    hs.one_of(
        hs.tuples(hs.sampled_from(WORKER)),
        hs.tuples(hs.sampled_from(ENGINE)),
        hs.tuples(hs.just("advance"), hs.sampled_from([1.0, 6.0, 25.0])),
        hs.tuples(hs.just("slip"), hs.sampled_from(WORKER), hs.sampled_from(ENGINE)),
    ),
    max_size=20,
)
"""What a worker, the clock and the engine do, in any order; `slip W E`: the engine does E
and the worker's W commits right after the engine's first read of the command rows."""


class World:
    def __init__(self) -> None:
        self.now = 1000.0
        self.store = MemoryStore()
        self.service = Lifecycle(
            self.store,
            Orchestrator(self.store, clock=lambda: self.now, machine_id=1),
            default_timeout=40.0,
        )
        self.playbook = load.load_text(LOOP)
        _, version = self.service.register(LOOP, self.playbook)
        self.xid, _ = self.service.start(self.playbook, version, {})
        self.held: list[tuple[port.CommandRow, port.Lease]] = []
        self._reads = (self.store.get_commands, self.store.open_commands)

    def do(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "advance":
            self.now += op[1]
        elif kind == "slip":
            self.slip(lambda: self.do((op[1],)))
            try:
                self.do((op[2],))
            finally:
                self.unslip()
        elif kind in WORKER:
            self._quietly(getattr(self, kind))
        else:
            self._quietly(getattr(self, f"engine_{kind}"))

    def _quietly(self, act: Callable[[], object]) -> None:
        # a refused claim or report, an action on an ended run: what callers meet
        with contextlib.suppress(MilepostError):
            act()

    # -- a worker --------------------------------------------------------------------------

    def claim(self) -> None:
        self.held += self.service.claim_next("w1", LEASE_S, 1)

    def report(self) -> None:
        if self.held:
            row, lease = self.held.pop(0)
            self.service.report(
                [claim_completed(self.service.new_id(), row, lease, self.now, row.index)]
            )

    def release(self) -> None:
        if self.held:
            row, lease = self.held.pop(0)
            self.service.release(row.command_id, "w1", lease.epoch)

    # -- the engine ------------------------------------------------------------------------

    def engine_cancel(self) -> None:
        self.service.cancel(self.xid, "op")

    def engine_abandon(self) -> None:
        self.service.abandon_overdue([self.xid], now=True)

    def engine_retry(self) -> None:
        actions.retry(self.service, self.xid, "start", "op")

    def engine_skip(self) -> None:
        actions.skip(self.service, self.xid, "start", [0], "op")

    def engine_tick(self) -> None:
        self.service.tick(self.now)

    # -- the slip --------------------------------------------------------------------------

    def slip(self, move: Callable[[], None]) -> None:
        """Run `move` once, right after the next read of command rows returns."""
        armed = [move]

        def after(read: Callable[..., Any]) -> Callable[..., Any]:
            def wrapped(*args: Any, **kw: Any) -> Any:
                got = read(*args, **kw)
                if armed:
                    armed.pop()()
                return got

            return wrapped

        get, open_ = self._reads
        self.store.get_commands = after(get)  # type: ignore[method-assign]
        self.store.open_commands = after(open_)  # type: ignore[method-assign]

    def unslip(self) -> None:
        self.store.__dict__.pop("get_commands", None)
        self.store.__dict__.pop("open_commands", None)


def evidence(world: World) -> checks.Evidence:
    return checks.Evidence(
        logs={world.xid: world.store.load(world.xid)}, expected={}, effects=[], reported=set()
    )


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_no_settlement_of_the_engine_overwrites_what_came_after_its_read(
    ops: list[tuple[Any, ...]],
) -> None:
    world = World()
    for op in ops:
        world.do(op)
        x = evidence(world)
        assert checks.fenced(x) == [], op
        assert checks.one_terminal_event(x) == [], op
    # asked to stop and abandoned: it ends, whatever slipped in
    world.do(("cancel",))
    world.do(("abandon",))
    assert world.service.read(world.xid, lambda s, _: s.status) in st.TERMINAL


def test_a_claim_between_the_engines_read_and_its_append_is_not_overwritten() -> None:
    """The regression, one interleaving: an operator's retry read the step's attempts as
    queued, and a worker's claim committed before the retry's append. The engine's
    `command.failed` at epoch 0 went in over the live claim; now the append is refused and
    the retry stops the attempt at the claim's epoch instead."""
    world = World()
    world.do(("slip", "claim", "retry"))
    [(row, lease)] = world.held
    log = world.store.load(world.xid)
    claimed = next(i for i, e in enumerate(log) if e.event_type == ev.COMMAND_CLAIMED)
    [stopped] = [
        e
        for e in log
        if e.event_type == ev.COMMAND_FAILED and e.payload["command_id"] == row.command_id
    ]
    assert log.index(stopped) > claimed and stopped.meta["epoch"] == lease.epoch == 1
    assert checks.fenced(evidence(world)) == []
    # the retry issued the step again, and its own events went in once
    assert [e.event_type for e in log].count(ev.STEP_RETRY_REQUESTED) == 1
