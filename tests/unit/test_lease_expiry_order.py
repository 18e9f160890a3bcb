"""Issue 33, item 7, the class: whatever the order of claims, reports, releases,
heartbeats, the reconciler's reads of expired claims (kept across a database outage and
used later) and its ticks, no `command.lease_expired` is folded after the report that
settled its command, and `describe` never shows a reported attempt as LOST."""

from __future__ import annotations

import textwrap
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as hs

from milepost.core import events as ev
from milepost.engine import describe
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.orchestrator import Orchestrator
from milepost.errors import MilepostError
from milepost.playbook import load
from milepost.store import port
from milepost.store.memory import MemoryStore
from tests.reports import claim_completed

LOOP = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: lost, path: tests/lost}
    workflow:
      - step: start
        loop: {in: "{{ [1, 2, 3] }}", iterator: n, mode: parallel}
        tool: {kind: python, code: "result = n"}
    """)
LEASE_S = 5.0

OPS = hs.lists(
    hs.sampled_from(
        [
            ("claim",),
            ("report",),
            ("release",),
            ("heartbeat",),
            ("read",),
            ("advance", 1.0),
            ("advance", LEASE_S + 1),
            ("tick", True),
            ("tick", False),
        ]
    ),
    max_size=25,
).map(lambda ops: [("advance", LEASE_S + 1), ("read",), *ops])
"""What a worker, the clock and the reconciler do, in any order, after the loop's three
commands were claimed and their leases lapsed: `read` keeps the reconciler's read of the
expired claims (made before a database outage; one is made first), `tick True` ticks with
that read, `tick False` with a fresh one."""


class World:
    def __init__(self) -> None:
        self.now = 1000.0
        self.store = MemoryStore()
        self.service = Lifecycle(
            self.store, Orchestrator(self.store, clock=lambda: self.now, machine_id=1)
        )
        self.playbook = load.load_text(LOOP)
        _, version = self.service.register(LOOP, self.playbook)
        self.xid, _ = self.service.start(self.playbook, version, {})
        self.held: list[tuple[port.CommandRow, port.Lease]] = self.service.claim_next(
            "w1", LEASE_S, 3
        )
        self.kept: list[port.CommandRow] | None = None
        """The reconciler's read of the expired claims, before an outage."""

    def do(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        try:
            if kind == "claim":
                self.held += self.service.claim_next("w1", LEASE_S, 1)
            elif kind == "report" and self.held:
                self.service.report([self.completed(*self.held.pop(0))])
            elif kind == "release" and self.held:
                row, lease = self.held.pop(0)
                self.service.release(row.command_id, "w1", lease.epoch)
            elif kind == "heartbeat":
                for row, lease in self.held:
                    self.service.heartbeat(row.command_id, "w1", lease.epoch, LEASE_S)
            elif kind == "read":
                self.kept = self.store.expired_claims(self.now)
            elif kind == "advance":
                self.now += op[1]
            elif kind == "tick":
                self.tick(stale=op[1])
        except MilepostError:
            pass  # a refused heartbeat, a report of an ended run: what a worker meets

    def tick(self, stale: bool) -> None:
        if stale and self.kept is not None:
            kept = self.kept
            self.store.expired_claims = lambda now: kept  # type: ignore[method-assign]
        try:
            self.service.reconciler.tick(self.now)
        finally:
            self.store.__dict__.pop("expired_claims", None)

    def completed(self, row: port.CommandRow, lease: port.Lease) -> ev.Event:
        return claim_completed(self.service.new_id(), row, lease, self.now, row.index)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_no_lease_expiry_is_folded_after_its_commands_report(ops: list[tuple[Any, ...]]) -> None:
    world = World()
    for op in ops:
        world.do(op)
    log = world.service.events(world.xid)
    reported: set[int] = set()
    for event in log:
        if event.meta.get("stale") or "command_id" not in event.payload:
            continue
        cid = int(event.payload["command_id"])
        if event.event_type in ev.SETTLING_REPORTS:
            reported.add(cid)
        elif event.event_type == ev.COMMAND_LEASE_EXPIRED:
            assert cid not in reported, f"command {cid} lost after its report"
            reported.add(cid)  # a report after the loss must be stale
    state = world.service.read(world.xid, lambda s, _: s)
    shown = describe.view(state, world.playbook, log)
    completed = {
        str(e.payload["command_id"])
        for e in log
        if e.event_type == ev.COMMAND_COMPLETED and not e.meta.get("stale")
    }
    for attempt in shown["steps"]["start"]["attempts"]:
        if attempt["command_id"] in completed:
            assert attempt["status"] == "COMPLETED", attempt
