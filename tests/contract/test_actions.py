"""What the operator's side needs of every store: a restart's link projected from its
`execution.started` (the old run lists its restarts, on any shard), and tokens listed and
revoked (a revoked token is no longer found)."""

from __future__ import annotations

from typing import Any

from milepost.core import events as ev
from milepost.store import port
from tests.contract.conftest import StoreFactory
from tests.contract.test_store import event, new_id


def started(xid: int, **payload: Any) -> ev.Event:
    return ev.new_event(
        new_id(), xid, ev.EXECUTION_STARTED, 1.0, payload={"path": "p", "version": 1, **payload}
    )


def test_a_restart_is_listed_by_the_run_it_restarts(store: Any) -> None:
    old = 4_000_001
    store.append([started(old), event(old, ev.EXECUTION_FAILED, error={"message": "x"})])
    store.append([started(4_000_003, restarted_from=str(old))])
    store.append([started(4_000_002, restarted_from=str(old)), started(4_000_004)])
    store.append([started(4_000_005, rerun_of=str(old))])  # a re-run is no restart
    assert store.restarts_of(old) == [4_000_002, 4_000_003]
    assert store.restarts_of(4_000_002) == []


def test_tokens_are_listed_and_a_revoked_one_is_not_found(make_store: StoreFactory) -> None:
    store, other = make_store(), make_store()
    store.create_token("b" * 64, "viewer", "ci", 6.0, user="ann")
    store.create_token("a" * 64, "worker", None, 5.0)
    assert [r.token_hash[0] for r in other.list_tokens()] == ["a", "b"]  # oldest first
    assert other.list_tokens()[1] == port.TokenRow("b" * 64, "viewer", "ci", 6.0, "ann")
    assert other.delete_token("b" * 64) is True
    assert store.get_token("b" * 64) is None and other.delete_token("b" * 64) is False
    assert [r.token_hash for r in store.list_tokens()] == ["a" * 64]
