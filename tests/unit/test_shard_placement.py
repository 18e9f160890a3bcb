"""Where an execution lives among N databases is stable forever: a pinned table.

`shard_of` decides which PostgreSQL database holds an execution's events. Once a run
is stored, changing the function would lose it (the store would look in the wrong
database), so the placement of these ids is pinned; a change to `shard_of` that moves
any of them fails here. Computing the expectation with `shard_of` itself could not.
"""

from __future__ import annotations

import pytest

from milepost.store.sharded import shard_of

# (execution id, its shard among 2, among 3, among 4)
PLACEMENT = [
    (0, 0, 0, 0),
    (1, 1, 1, 1),
    (2, 0, 1, 2),
    (3, 0, 2, 0),
    (6, 0, 1, 0),
    (10, 1, 2, 1),
    (199, 1, 1, 1),
    (4294967296, 1, 1, 3),
    (9223372036854775807, 1, 1, 1),
    # snowflakes of machine 0, one per millisecond (sequence 0: every id is even)
    (419430400000000000, 0, 2, 2),
    (419430400004194304, 1, 2, 3),
    (419430400008388608, 1, 2, 3),
    (419430400012582912, 0, 0, 0),
    (419430400016777216, 0, 0, 2),
    (419430400020971520, 0, 0, 2),
    # two snowflakes of machine 5 in one millisecond (sequence 0 and 1)
    (838860800515919872, 1, 1, 3),
    (838860800515919873, 0, 0, 0),
]


@pytest.mark.parametrize(("execution_id", "of2", "of3", "of4"), PLACEMENT)
def test_an_execution_id_lands_on_its_pinned_shard(
    execution_id: int, of2: int, of3: int, of4: int
) -> None:
    assert [shard_of(execution_id, n) for n in (2, 3, 4)] == [of2, of3, of4]


def test_one_database_holds_everything() -> None:
    assert {shard_of(x, 1) for x, *_ in PLACEMENT} == {0}
