"""The engine's claim-report loop on the in-memory store: no database, no worker, no clock
but the one passed in. A fake worker answers every claimed command; the run must reach
the status the playbook's logic gives, with every claim in the log."""

from __future__ import annotations

import itertools
import logging
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.orchestrator import Orchestrator, Outcome
from milepost.playbook import load
from milepost.store import port
from milepost.store.memory import MemoryStore

LOOP = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: m, path: tests/memory}
    workflow:
      - step: start
        tool: {kind: python, code: "result = [1, 2, 3]"}
        next: each
      - step: each
        loop: {in: "{{ start }}", iterator: n}
        tool: {kind: python, code: "result = n"}
        spec: {retry: {max_attempts: 2, delay: 0, retry_on: [exception]}}
        next: end
      - step: end
        tool: {kind: python, code: "result = 0"}
    """)

Answer = Callable[[port.CommandRow], tuple[bool, Any]]


def drive(answer: Answer) -> tuple[MemoryStore, st.ExecutionState]:
    """Start LOOP and answer each claimed command with `answer(row)` -> (ok, result) until
    nothing is claimed any more; time moves a second a report."""
    clock = itertools.count(1000.0)
    now = [next(clock)]
    store = MemoryStore()
    orchestrator = Orchestrator(store, clock=lambda: now[0], machine_id=1)
    pb = load.load_text(LOOP)
    _, version = orchestrator.register(LOOP, pb)

    def claim() -> port.ClaimRequest:
        return port.ClaimRequest("w1", now[0], 30.0, 10, new_id=orchestrator.new_id)

    xid, outcome = orchestrator.start(pb, version, {}, claim=claim())
    pending = list(outcome.claimed)
    while pending:
        row, lease = pending.pop(0)
        ok, result = answer(row)
        base = {
            "command_id": row.command_id,
            "run": row.run,
            "index": row.index,
            "attempt": row.attempt,
            "epoch": lease.epoch,
        }
        payload = (
            {**base, "result": result}
            if ok
            else {**base, "error": {"kind": "exception", "retryable": True, "message": "boom"}}
        )
        report = ev.new_event(
            orchestrator.new_id(),
            xid,
            ev.COMMAND_COMPLETED if ok else ev.COMMAND_FAILED,
            now[0],
            step=row.step,
            payload=payload,
            meta={"epoch": lease.epoch},
        )
        now[0] = next(clock)
        outcome = orchestrator.process([report], claim=claim())
        pending += outcome.claimed
        for when in outcome.wake_at.values():  # a retry delay: wake when it is due
            now[0] = max(now[0], when)
            pending += orchestrator.process(also=[xid], claim=claim()).claimed
    return store, orchestrator.state(xid)


def test_a_loop_runs_to_its_end_on_claims_alone() -> None:
    store, state = drive(lambda row: (True, row.index if row.step == "each" else [1, 2, 3]))
    assert state.status == st.COMPLETED
    assert list(state.results["each"]) == [0, 1, 2]
    kinds = [e.event_type for e in store.load(state.execution_id)]
    # one claim per command, each before that command's report
    assert kinds.count(ev.COMMAND_CLAIMED) == kinds.count(ev.COMMAND_ISSUED) == 5


def test_a_failed_iteration_is_retried_under_a_new_attempt_and_key() -> None:
    failed: set[int] = set()

    def answer(row: port.CommandRow) -> tuple[bool, Any]:
        if row.step == "each" and row.index == 1 and not failed:
            failed.add(row.command_id)
            return False, None
        return True, row.index if row.step == "each" else [1, 2, 3]

    store, state = drive(answer)
    assert state.status == st.COMPLETED and list(state.results["each"]) == [0, 1, 2]
    assert store.open_commands(state.execution_id) == []  # nothing left queued or claimed
    tries = [
        e.payload
        for e in store.load(state.execution_id)
        if e.event_type == ev.COMMAND_ISSUED and e.step == "each" and e.payload.get("index") == 1
    ]
    assert [t["attempt"] for t in tries] == [1, 2]
    assert tries[0]["idempotency_key"] != tries[1]["idempotency_key"]


def test_listeners_see_each_call_s_committed_events_and_one_that_raises_fails_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    service = Lifecycle(store, Orchestrator(store, clock=lambda: 1000.0, machine_id=1))
    seen: list[list[ev.Event]] = []
    in_the_log: list[bool] = []

    def broken(outcome: Outcome) -> None:
        raise RuntimeError("a listener's bug")

    def record(outcome: Outcome) -> None:
        # called after the commit: what it is told about is in the log already
        stored = {e.event_id for e in store.load(outcome.events[0].execution_id)}
        in_the_log.append(all(e.event_id in stored for e in outcome.events))
        seen.append(list(outcome.events))

    service.listeners += [broken, record]
    pb = load.load_text(LOOP)
    _, version = service.register(LOOP, pb)
    with caplog.at_level(logging.ERROR, logger="milepost.engine.lifecycle"):
        xid, outcome = service.start(pb, version, {})
    assert seen == [outcome.events] and in_the_log == [True]
    assert [e.event_type for e in seen[0]][:3] == [
        ev.EXECUTION_STARTED,
        ev.STEP_ENTER,
        ev.COMMAND_ISSUED,
    ]
    assert service.execution(xid).status == st.RUNNING  # the start stands
    assert [r.getMessage() for r in caplog.records] == ["an outcome listener raised"]
