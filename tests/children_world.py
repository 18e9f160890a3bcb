"""The engine service with runs and their children, on the in-memory store and a clock the
test moves: what the property tests of issue 33 (items 1 to 3) drive; and the playbooks of
parents and children the embedded and server tests of those items run (`HOLDING_CHILD` ..).

`World` is one `Lifecycle` and one scripted worker. The worker claims what is queued, holds
its claims (heartbeating them when told), runs a `playbook` command as the tool does (it
starts the child through `Lifecycle.start`, naming the parent command, and reports once
the child has ended: a CANCELLED child as `child_cancelled`), and reports a stopped attempt
of a cancelled run as a worker that heard of the cancel does. Nothing sleeps: `advance`
moves the clock and runs the reconciler's tick.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from milepost.core import cancellation
from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.orchestrator import Orchestrator
from milepost.errors import MilepostError
from milepost.playbook import load, model
from milepost.store import port
from milepost.store.memory import MemoryStore
from tests.holding_step import hold_tool

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\n"
WORKER = "w1"


def text(path: str, body: str) -> str:
    return HEADER + f"metadata: {{name: {path.rsplit('/', 1)[-1]}, path: {path}}}\n" + body


CHILD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child, path: tests/child}
workload: {x: 1}
workflow:
  - step: start
    tool: {kind: python, input: {x: "{{ workload.x }}"}, code: "result = {'double': x * 2}"}
"""
"""`tests/child`: one python step that doubles `workload.x`."""

# its own timeout bounds it: the engine's default_timeout of a test reaches only the parent
HOLDING_CHILD = text(
    "tests/children/holding",
    "workflow:\n  - step: hold\n    spec: {timeout: 60s}\n" + hold_tool(),
)
CALLS_HOLDING = text(
    "tests/children/calls_holding",
    """\
executor: {spec: {cancel_grace: 20s}}
workflow:
  - step: call
    tool: {kind: playbook, path: tests/children/holding, input: {out: "{{ workload.out }}"}}
""",
)
# three iterations of 1.5 s one after the other: an event every 1.5 s, none in the parent
STEADY_CHILD = text(
    "tests/children/steady",
    """\
workflow:
  - step: work
    loop: {in: "{{ [1, 2, 3] }}", iterator: n, spec: {mode: sequential}}
    tool: {kind: python, input: {n: "{{ n }}"}, code: "import time\\ntime.sleep(1.5)\\nresult = n"}
""",
)
WAITS_ON_STEADY = text(
    "tests/children/waits_on_steady",
    """\
executor: {spec: {stall_after: 3s}}
workflow:
  - step: call
    tool: {kind: playbook, path: tests/children/steady, return_step: work}
""",
)
# a 5 s step with no `spec.timeout` under a 2 s stall window: its heartbeats write no event
SLOW_STEP = text(
    "tests/children/slow_step",
    """\
executor: {spec: {stall_after: 2s}}
workflow:
  - step: think
    tool: {kind: python, code: "import time\\ntime.sleep(5)\\nresult = 'thought'"}
""",
)


def chain(
    depth: int, *, executor: str = "", call_spec: str = "", other: str = "", child_spec: str = ""
) -> list[str]:
    """Playbooks `tests/world/level0` .. `level<depth>`: each level's `call` step runs the
    next level as its child, the last level's `work` is a python step. Level 0 gets
    `executor` (a line) and `call_spec` (its `call` step's `spec`), and with `other` (a
    step's YAML) that step beside `call`; the other levels' steps get `child_spec`."""
    texts = []
    for level in range(depth + 1):
        spec = call_spec if level == 0 else child_spec
        spec_line = f"    spec: {spec}\n" if spec else ""
        if level == depth:
            steps = "  - step: work\n    tool: {kind: python, code: 'result = 1'}\n" + spec_line
        else:
            steps = (
                "  - step: call\n"
                f"    tool: {{kind: playbook, path: tests/world/level{level + 1}}}\n" + spec_line
            )
        head = executor if level == 0 else ""
        if level == 0 and other:
            steps = (
                "  - step: start\n    tool: {kind: noop}\n    next: {spec: {mode: inclusive}, arcs: [{step: call}, {step: other}]}\n"
                + steps
            )
            steps += other
        texts.append(text(f"tests/world/level{level}", head + "workflow:\n" + steps))
    return texts


@dataclass
class Held:
    """A claim the worker holds: its command row, its epoch, and the child its `playbook`
    attempt started (None: not a playbook command, or not started yet)."""

    row: port.CommandRow
    epoch: int
    lease_s: float
    child: int | None = None


@dataclass
class World:
    now: float = 1000.0
    lease_s: float = 30.0
    default_timeout: float | None = None
    store: MemoryStore = field(default_factory=MemoryStore)
    held: dict[int, Held] = field(default_factory=dict)
    starts_children: bool = True
    """False: a claimed `playbook` command's child is not started yet (`start_children`)."""
    leaves_done: bool = False
    """True: the worker completes every other command it holds when it works."""
    stops: bool = True
    """False: the worker never stops an attempt for a cancel (the grace abandons it)."""

    def __post_init__(self) -> None:
        self.orchestrator = Orchestrator(self.store, clock=lambda: self.now, machine_id=1)
        self.engine = Lifecycle(self.store, self.orchestrator, default_timeout=self.default_timeout)
        self.playbooks: dict[str, tuple[model.Playbook, int]] = {}
        self._ids = itertools.count(1)

    # -- set-up ----------------------------------------------------------------------------

    def register(self, *texts: str) -> None:
        for one in texts:
            pb = load.load_text(one)
            _, version = self.engine.register(one, pb)
            self.playbooks[pb.path] = (pb, version)

    def start(self, path: str) -> int:
        pb, version = self.playbooks[path]
        xid, _ = self.engine.start(pb, version, {})
        return xid

    # -- the clock -------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Time passes; the reconciler looks (leases, timeouts, stalls, cancel graces)."""
        self.now += seconds
        self.engine.tick(self.now)

    # -- the worker ------------------------------------------------------------------------

    def claim(self) -> None:
        """Take every queued command; start the children of `playbook` commands."""
        for row, lease in self.engine.claim_next(WORKER, self.lease_s, 100):
            self.held[row.command_id] = Held(row, lease.epoch, lease.lease_s or self.lease_s)
        if self.starts_children:
            self.start_children()

    def start_children(self) -> None:
        for held in list(self.held.values()):
            if held.child is None and self._is_playbook(held.row):
                held.child = self._start_child(held.row)

    def beat(self, only: set[int] | None = None) -> None:
        """Heartbeat the claims held (of the runs in `only`); a refused one is dropped, as
        a worker drops an attempt whose command was settled."""
        for cid, held in list(self.held.items()):
            if only is not None and held.row.execution_id not in only:
                continue
            try:
                self.engine.heartbeat(cid, WORKER, held.epoch, held.lease_s)
            except MilepostError:
                del self.held[cid]

    def work(self) -> None:
        """What the worker's attempts do now: a stopped attempt of a cancelled run reports
        `cancelled`, a `playbook` attempt whose child ended reports how it ended."""
        for cid, held in list(self.held.items()):
            xid = held.row.execution_id
            row = self.store.get_execution(xid)
            if row is not None and (row.cancel_requested or row.status in st.TERMINAL):
                if self.stops:
                    self.report(cid, error=cancellation.STOPPED)
            elif held.child is not None:
                child = self.store.get_execution(held.child)
                assert child is not None
                if child.status == st.COMPLETED:
                    self.report(cid, result={"execution_id": str(held.child)})
                elif child.status in st.TERMINAL:
                    code = cancellation.CHILD_CANCELLED if child.status == st.CANCELLED else None
                    error = {"kind": "playbook", "code": code, "message": child.status}
                    self.report(cid, error=error)
            elif self.leaves_done and not self._is_playbook(held.row):
                self.report(cid, result=1)

    def complete(self, step: str, result: Any = 1, **extra: Any) -> None:
        """Report every held command of `step` completed (`extra`: more payload)."""
        for cid, held in list(self.held.items()):
            if held.row.step == step:
                self.report(cid, result=result, **extra)

    def fail(self, step: str) -> None:
        for cid, held in list(self.held.items()):
            if held.row.step == step:
                self.report(cid, error={"kind": "exception", "message": "boom"})

    def report(
        self,
        command_id: int,
        *,
        result: Any = None,
        error: dict[str, Any] | None = None,
        **extra: Any,
    ) -> None:
        held = self.held.pop(command_id)
        row = held.row
        payload: dict[str, Any] = {
            "command_id": row.command_id,
            "run": row.run,
            "index": row.index,
            "attempt": row.attempt,
            "epoch": held.epoch,
            **extra,
        }
        payload.update({"error": error} if error is not None else {"result": result})
        event = ev.new_event(
            self.engine.new_id(),
            row.execution_id,
            ev.COMMAND_FAILED if error is not None else ev.COMMAND_COMPLETED,
            self.now,
            step=row.step,
            payload=payload,
            worker_id=WORKER,
            meta={"epoch": held.epoch},
        )
        self.engine.report([event], made_here=True)  # settled meanwhile: marked stale

    def settle(self, rounds: int = 200, step: float = 1.0) -> None:
        """Let the worker (its leaves done) and the clock run until no run is RUNNING (or
        `rounds` pass)."""
        self.leaves_done = True
        for _ in range(rounds):
            if not self.running():
                return
            self.claim()
            self.beat()
            self.work()
            self.advance(step)

    # -- reads -----------------------------------------------------------------------------

    def status(self, xid: int) -> str:
        row = self.store.get_execution(xid)
        assert row is not None
        return row.status

    def state(self, xid: int) -> st.ExecutionState:
        return self.orchestrator.state(xid)

    def running(self) -> list[int]:
        return [r.execution_id for r in self.store.list_executions(status=st.RUNNING, limit=1000)]

    def descendants(self, xid: int) -> list[int]:
        rows = self.store.list_executions(limit=1000)
        found, frontier = [], [xid]
        while frontier:
            parent = frontier.pop()
            kids = [r.execution_id for r in rows if r.parent_execution_id == parent]
            found += kids
            frontier += kids
        return found

    # -- internals -------------------------------------------------------------------------

    def _is_playbook(self, row: port.CommandRow) -> bool:
        state = self.state(row.execution_id)
        pb = self.orchestrator.playbook_for(state)
        return pb.steps[row.step].tasks[0].kind == "playbook"

    def _start_child(self, row: port.CommandRow) -> int:
        state = self.state(row.execution_id)
        pb = self.orchestrator.playbook_for(state)
        path = pb.steps[row.step].tasks[0].config["path"]
        child_pb, version = self.playbooks[path]
        xid, _ = self.engine.start(
            child_pb,
            version,
            {},
            parent_execution_id=row.execution_id,
            parent_command_id=row.command_id,
        )
        return xid
