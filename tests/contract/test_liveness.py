"""A step's own lease (`spec.liveness`, carried by `command.issued` as `lease_s`) is what
every claim path and every heartbeat give its command, the stall query names the runs
silent past their `stall_after`, and a run's last event's time is read alone (on every
adapter)."""

from __future__ import annotations

import dataclasses
from typing import Any

from milepost.core import events as ev
from milepost.store import port, projection
from tests.contract.log import issued, new_id


def event(
    xid: int, etype: str, at: float = 100.0, step: str | None = "s", **payload: Any
) -> ev.Event:
    return ev.new_event(new_id(), xid, etype, at, step=step, payload=payload)


def started(xid: int, at: float = 100.0, **stall: float) -> ev.Event:
    return event(xid, ev.EXECUTION_STARTED, at, None, path="p", **stall)


def test_a_claim_by_id_leases_the_command_for_its_own_liveness(store: Any) -> None:
    store.append([started(1), issued(1, 11, lease_s=4.0), issued(1, 12)])
    own = store.claim(11, "w1", now=10.0, lease_s=30.0, new_id=new_id)
    asked = store.claim(12, "w1", now=10.0, lease_s=30.0, new_id=new_id)
    assert (own.expires_at, own.lease_s) == (14.0, 4.0)
    assert (asked.expires_at, asked.lease_s) == (40.0, 30.0)
    assert store.get_command(11).lease_expires_at == 14.0
    claimed = [e for e in store.load(1) if e.event_type == ev.COMMAND_CLAIMED]
    assert [e.payload["lease_expires_at"] for e in claimed] == [14.0, 40.0]


def test_claim_next_and_a_report_s_claim_lease_each_command_for_its_own(store: Any) -> None:
    store.append([started(2), issued(2, 21, lease_s=2.5), issued(2, 22)])
    taken = store.claim_next("w1", 50.0, 30.0, 1, new_id=new_id)
    _, by_report = store.append_and_claim(
        [event(2, ev.STEP_ENTER, run=1)], port.ClaimRequest("w2", 51.0, 20.0, 5, new_id=new_id)
    )
    leases = {row.command_id: lease for row, lease in [*taken, *by_report]}
    assert (leases[21].expires_at, leases[21].lease_s) == (52.5, 2.5)
    assert (leases[22].expires_at, leases[22].lease_s) == (71.0, 20.0)
    rows = store.get_commands([21, 22])
    assert (rows[21].lease_expires_at, rows[22].lease_expires_at) == (52.5, 71.0)


def test_a_heartbeat_extends_by_the_command_s_own_lease(store: Any) -> None:
    store.append([started(3), issued(3, 31, lease_s=3.0), issued(3, 32)])
    own = store.claim(31, "w1", now=10.0, lease_s=30.0, new_id=new_id)
    other = store.claim(32, "w1", now=10.0, lease_s=30.0, new_id=new_id)
    beat = store.heartbeat(31, "w1", own.epoch, now=12.0, lease_s=30.0)
    assert (beat.expires_at, beat.lease_s) == (15.0, 3.0)
    assert store.heartbeat(32, "w1", other.epoch, now=12.0, lease_s=30.0).expires_at == 42.0
    assert store.get_command(31).lease_expires_at == 15.0
    # expired by its own lease, not by the one its claimer asked for
    assert [r.command_id for r in store.expired_claims(16.0)] == [31]


def test_the_command_rows_rebuilt_from_the_log_match_with_own_leases(store: Any) -> None:
    store.append([started(4), issued(4, 41, lease_s=5.0), issued(4, 42)])
    store.claim(41, "w1", now=10.0, lease_s=30.0, new_id=new_id)
    store.claim_next("w2", 11.0, 30.0, 1, new_id=new_id)
    rebuilt = projection.rebuild(store.load(4)).commands
    assert rebuilt == store.get_commands([41, 42])


def test_runs_silent_past_their_stall_window_are_listed_with_their_last_event(store: Any) -> None:
    store.append(
        [
            started(5, 100.0, stall_after=10.0),
            event(5, ev.STEP_ENTER, 103.0, run=1),
            started(6, 100.0),
            started(7, 100.0, stall_after=10.0),
            event(7, ev.EXECUTION_COMPLETED, 101.0, None),
        ]
    )
    assert store.stalled_executions(112.0) == []  # 5 spoke at 103: 9 s ago
    assert store.stalled_executions(113.5) == [(5, 103.0)]  # 6 has no window, 7 ended
    store.append(
        [
            event(
                5,
                ev.COMMAND_ISSUED,
                113.0,
                command_id=51,
                run=1,
                index=-1,
                attempt=1,
                idempotency_key="k51",
            )
        ]
    )
    assert store.stalled_executions(120.0) == []


def test_the_time_of_a_run_s_last_event_is_read_alone(store: Any) -> None:
    """What a child's progress starts from (`engine.liveness.progress`)."""
    assert store.last_event_at(10) is None
    store.append([started(10, 100.0), event(10, ev.STEP_ENTER, 104.5, run=1)])
    store.append([started(11, 101.0)])
    assert store.last_event_at(10) == 104.5
    assert store.last_event_at(11) == 101.0


def test_a_run_without_liveness_fields_projects_as_before(store: Any) -> None:
    """No `lease_s` nor `stall_after`: the claim is the asked lease, and no stall."""
    store.append([started(8), issued(8, 81)])
    lease = store.claim(81, "w1", now=10.0, lease_s=7.0, new_id=new_id)
    assert dataclasses.astuple(store.get_command(81))[9:11] == (lease.epoch, 17.0)
    assert store.stalled_executions(10_000.0) == []


def test_overdue_claims_are_those_taken_long_ago_whatever_their_heartbeats(store: Any) -> None:
    store.append([started(9), issued(9, 91), issued(9, 92), issued(9, 93)])
    old = store.claim(91, "w1", now=10.0, lease_s=5.0, new_id=new_id)
    store.heartbeat(91, "w1", old.epoch, now=19.0, lease_s=5.0)  # alive, and still overdue
    store.claim_next("w2", 15.0, 5.0, 1, new_id=new_id)  # 92
    assert [r.command_id for r in store.overdue_claims(20.0, 8.0)] == [91]
    assert [r.command_id for r in store.overdue_claims(20.0, 4.0)] == [91, 92]
    lease = store.claim(93, "w3", now=12.0, lease_s=5.0, new_id=new_id)
    store.release(93, "w3", lease.epoch, 13.0, new_id=new_id)  # queued again: no claim
    assert 93 not in [r.command_id for r in store.overdue_claims(100.0, 1.0)]
