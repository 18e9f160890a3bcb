"""A run that moves is never failed as stalled (issue 33, items 1 and 3): what moves a run
is an event of its log, a live attempt (heartbeats write no event: they extend its lease)
or a running child that moves, whatever the stall window, the lease and how often the
workers heartbeat. Properties on the engine service (`engine.liveness`) over the
in-memory store and a clock the test moves, with a control that the window still fails a
run nothing moves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as hs

from milepost.core import liveness
from milepost.core import state as st
from milepost.engine import liveness as engine_liveness
from tests.children_world import World, text

ROOT = "tests/world/level0"
LEAF = "tests/world/leaf"


def playbooks(stall: float, child: str = "leaf") -> list[str]:
    """A root with a stall window whose one step runs `child`: `leaf` (a long sequential
    loop, an event an iteration) or `middle` (which runs the leaf: a grandchild)."""
    return [
        text(
            ROOT,
            f"executor: {{spec: {{stall_after: {stall}}}}}\nworkflow:\n"
            f"  - step: call\n    tool: {{kind: playbook, path: tests/world/{child}}}\n",
        ),
        text(
            "tests/world/middle",
            "workflow:\n  - step: call\n    tool: {kind: playbook, path: tests/world/leaf}\n",
        ),
        text(
            LEAF,
            "workflow:\n  - step: work\n"
            '    loop: {in: "{{ range(1000) | list }}", iterator: n, spec: {mode: sequential}}\n'
            "    tool: {kind: python, code: 'result = 1'}\n",
        ),
    ]


def stalled(world: World, root: int) -> bool:
    error = world.state(root).error
    return world.status(root) == st.FAILED and error is not None and error["kind"] == "stalled"


@settings(max_examples=80, deadline=None)
@given(
    stall=hs.floats(1.0, 30.0),
    lease=hs.floats(1.0, 120.0),
    beats=hs.lists(hs.floats(0.01, 0.99), min_size=1, max_size=30),
)
def test_a_run_whose_attempt_heartbeats_is_never_stalled(
    stall: float, lease: float, beats: list[float]
) -> None:
    """Each heartbeat comes within the lease (any share of it), however much longer than
    the stall window the gap between two is: the attempt is live, the run moves."""
    world = World(lease_s=lease)
    world.register(*playbooks(stall))
    root = world.start(ROOT)
    world.claim()
    world.claim()  # the child's first iteration
    for share in beats:
        world.advance(share * lease)
        assert not stalled(world, root), (world.now, world.state(root).error)
        world.beat()
    assert world.status(root) == st.RUNNING


@settings(max_examples=80, deadline=None)
@given(
    stall=hs.floats(1.0, 30.0),
    nested=hs.booleans(),
    moves=hs.lists(
        hs.tuples(hs.floats(0.01, 0.99), hs.sampled_from(["event", "beat"])),
        min_size=1,
        max_size=30,
    ),
)
def test_a_run_whose_descendant_moves_is_never_stalled_and_one_nothing_moves_is(
    stall: float, nested: bool, moves: list[tuple[float, str]]
) -> None:
    """The root's own attempt is silent (its lease lapsed, not yet found lost): what moves
    it is its child's progress, or a grandchild's: an iteration done (an event) or a
    heartbeat, each within the window. Once nothing moves for the window, it stalls."""
    lease = stall  # the descendants' claims live as long as the window
    world = World(lease_s=lease)
    world.register(*playbooks(stall, "middle" if nested else "leaf"))
    root = world.start(ROOT)
    for _ in range(3):
        world.claim()
    descendants = set(world.descendants(root))
    assert len(descendants) == (2 if nested else 1)
    for share, how in moves:
        world.now += share * stall
        if how == "event":
            world.complete("work")
            world.claim()
        else:
            world.beat(descendants)
        engine_liveness.fail_stalled(world.engine, world.now)  # no lease expiry: the stall
        assert not stalled(world, root), (world.now, world.state(root).error)
    world.now += 2 * stall + 0.01  # nothing moves: every claim lapsed, no event
    failed, errors = engine_liveness.fail_stalled(world.engine, world.now)
    assert errors == 0 and root in failed and stalled(world, root)


@given(
    now=hs.floats(0, 1e6),
    last_event=hs.floats(0, 1e6),
    leases=hs.lists(hs.one_of(hs.none(), hs.floats(0, 2e6)), max_size=5),
    children=hs.lists(hs.floats(0, 1e6), max_size=5),
)
def test_last_progress_is_the_latest_of_what_moved_and_never_after_now(
    now: float, last_event: float, leases: list[float | None], children: list[float]
) -> None:
    moved = liveness.last_progress(now, last_event, leases, children)
    assert moved >= last_event and all(moved >= c for c in children)
    assert all(moved >= min(now, end) for end in leases if end is not None)
    live = any(end is not None and end >= now for end in leases)
    assert (
        (moved >= now)
        if live
        else moved == max([last_event, *children, *(end for end in leases if end is not None)])
    )
