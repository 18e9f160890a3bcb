"""A run that ends leaves no RUNNING descendant (issue 33, item 1), whatever ended it:
a cancel, a stall, the engine's timeout, a lost lease, an engine error, an operator's skip
or retry, a failed step, a budget. The engine (`engine.children`) cancels the running
children of a run that ended and of a command that was settled, and a child whose start
was on its way then is cancelled as it starts; each such cancel is a cancel (its grace,
its own children in turn).

A property over the ways of ending, the depth of the tree, a child started late and a
worker that stops its attempts or not, checked after every move of the world:
nobody waits for a RUNNING child that was not asked to stop, and in the end nothing runs.
"""

from __future__ import annotations

from collections.abc import Callable
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as hs

from milepost.core import decide as dc
from milepost.core import state as st
from milepost.engine import actions, children
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.orchestrator import Orchestrator
from tests.children_world import World, chain

GRACE = "executor: {spec: {cancel_grace: 5s, stall_after: 20s, budget: {tokens: 100}}}\n"
LEASE = 10.0
OTHER = "  - step: other\n    tool: {kind: python, code: 'result = 2'}\n"
ROOT = "tests/world/level0"


def unwaited(world: World) -> list[int]:
    """The RUNNING runs nobody waits for that were not asked to stop: a child of a run that
    ended, or of a command no attempt runs for any more."""
    found = []
    for row in world.store.list_executions(limit=1000):
        if row.status != st.RUNNING or row.cancel_requested or row.parent_execution_id is None:
            continue
        parent = world.store.get_execution(row.parent_execution_id)
        [started] = world.store.load(row.execution_id, before_seq=2)
        command = world.store.get_command(int(started.payload["parent_command_id"]))
        assert parent is not None and command is not None
        if parent.status in st.TERMINAL or command.status not in ("queued", "claimed"):
            found.append(row.execution_id)
    return found


def checked(world: World) -> Callable[[], None]:
    def check() -> None:
        assert unwaited(world) == [], world.now

    return check


def decide_fails_for(xid: int) -> mock._patch[object]:
    """A bug in decide for one run (`kind: engine`, the run ends FAILED)."""
    real = dc.decide

    def decide(state: st.ExecutionState, *args: object) -> dc.Decision:
        if state.execution_id == xid:
            raise KeyError("a bug")
        return real(state, *args)  # type: ignore[arg-type]

    return mock.patch.object(dc, "decide", decide)


def end(world: World, root: int, how: str, check: Callable[[], None]) -> None:
    """End the root run (or, for `retry`, settle the command that started its child)."""
    descendants = set(world.descendants(root))
    if how == "cancel":
        world.engine.cancel(root, "user:op")
    elif how == "skip":
        actions.skip(world.engine, root, "call", {"skipped": True}, "user:op")
    elif how == "retry":
        actions.retry(world.engine, root, "call", "user:op")
    elif how == "engine_error":
        with decide_fails_for(root):
            world.engine.process(also=[root])
    elif how in ("timeout", "lost", "stall"):
        # the root's attempt goes silent (a dead worker: lost, then nobody takes it again:
        # stalled) or runs past the engine's default_timeout (its heartbeats go on)
        for _ in range(80):
            if world.status(root) != st.RUNNING:
                break
            world.beat(None if how == "timeout" else descendants)
            world.work()
            world.advance(1.0)
            check()
    elif how in ("fail", "budget"):
        if how == "fail":
            world.fail("other")
        else:
            world.complete("other", usage={"input_tokens": 1000, "output_tokens": 0})
    else:
        raise AssertionError(how)
    check()


ENDINGS = ["cancel", "skip", "retry", "engine_error", "timeout", "lost", "stall", "fail", "budget"]


@settings(max_examples=60, deadline=None)
@given(
    how=hs.sampled_from(ENDINGS),
    depth=hs.integers(1, 3),
    late=hs.booleans(),
    stops=hs.booleans(),
)
def test_a_run_that_ends_leaves_no_running_descendant(
    how: str, depth: int, late: bool, stops: bool
) -> None:
    world = World(lease_s=LEASE, default_timeout=30.0 if how == "timeout" else None)
    world.stops = stops
    # the root's `call` is lost once and for all (no retry), every step below is bounded
    # by its own timeout (the engine's default reaches only the root)
    world.register(
        *chain(
            depth,
            executor=GRACE,
            call_spec="{retry: {max_attempts: 1}}",
            other=OTHER,
            child_spec="{timeout: 1h}",
        )
    )
    check = checked(world)
    root = world.start(ROOT)
    world.claim()
    world.complete("start")
    world.starts_children = not late
    for _ in range(depth + 1):  # each level's child starts and claims its first command
        world.claim()
        check()
    end(world, root, how, check)
    if late:  # the tool's start of the child was on its way: it lands now
        world.start_children()
        world.starts_children = True
        check()
    if how == "retry":  # the root goes on, with a new child of its new attempt
        assert len([c for c in world.store.list_executions() if c.parent_execution_id == root])
    world.settle()
    check()
    assert world.running() == []
    assert world.status(root) in st.TERMINAL
    for child in world.descendants(root):
        assert world.status(child) in (st.CANCELLED, st.COMPLETED, st.FAILED)


def test_a_stalled_parent_s_child_is_cancelled_with_the_cause_and_its_grace() -> None:
    """The issue's case, on the engine alone: the parent's attempt went silent (its worker
    died) while its child worked; the lease lapses and nobody takes the attempt again, the
    parent stalls. Its child was cancelled when the command that waited for it was
    settled, naming why, and it ended CANCELLED after its own grace (the default 30 s) as
    the worker ignored the cancel."""
    world = World(lease_s=LEASE)
    world.stops = False
    world.register(*chain(1, executor=GRACE, call_spec="{retry: {max_attempts: 2}}"))
    root = world.start(ROOT)
    world.claim()
    [child] = world.descendants(root)
    world.claim()
    for _ in range(80):  # the child's worker lives, the parent's does not
        world.beat({child})
        world.advance(1.0)
        if world.status(root) != st.RUNNING:
            break
    [request] = [e for e in world.store.load(child) if e.event_type.endswith("cancel_requested")]
    assert request.payload == {"cause": f"parent {root} step 'call' stopped waiting"}
    assert world.status(child) == st.CANCELLED
    grace = [e for e in world.store.load(child) if e.event_type == "command.failed"]
    assert "abandoned after the cancel grace (30s)" in grace[0].payload["error"]["message"]
    assert world.status(root) == st.FAILED
    assert world.state(root).error["kind"] == "stalled"  # type: ignore[index]


def test_a_restarted_server_cancels_the_children_of_a_run_that_ended_while_it_stopped() -> None:
    """An operator skipped the step that waited for the child: the parent's end is
    committed, and the server stops before it cancels the child. The next server's
    `recover` finds the child nobody waits for, and cancels its own children in turn."""
    world = World(lease_s=LEASE)
    world.register(*chain(2, executor=GRACE))
    root = world.start(ROOT)
    for _ in range(3):
        world.claim()
    child, grandchild = world.descendants(root)
    with mock.patch.object(children, "orphaned", lambda *args: []):  # the server stopped
        actions.skip(world.engine, root, "call", {"skipped": True}, "user:op")
    assert world.status(root) == st.COMPLETED
    assert world.status(child) == st.RUNNING and unwaited(world) == [child]
    restarted = Lifecycle(world.store, Orchestrator(world.store, clock=lambda: world.now))
    restarted.recover()
    [request] = [e for e in world.store.load(child) if e.event_type.endswith("cancel_requested")]
    assert request.payload == {"cause": f"parent {root} completed"}
    assert unwaited(world) == []
    world.engine = restarted
    world.orchestrator = restarted.orchestrator
    world.settle()
    assert world.status(child) == world.status(grandchild) == st.CANCELLED
