"""What a run waits on (`core/waiting.py`), the fold of a task policy's retry note
(`call.error` with `retry`) and the runner that reports one (`attempt/runner.py`
`on_retry`): issue 33, item 12. Every view reading it: tests/api/test_waits.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as hs

from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import logs, waiting
from milepost.core import state as st
from milepost.core.work import TaskRetry, retry_note_events, work_item
from milepost.tools.base import ToolResult
from tests.unit.sim import Sim, playbook
from tests.unit.test_attempt import FakeSleep, FakeTools, err, ok, run
from tests.unit.test_attempt import playbook as attempt_playbook
from tests.unit.test_attempt import work_item as attempt_item

NOW = 1000.0

POLICY = """
workflow:
  - step: flaky
    tool:
      kind: python
      code: "raise ValueError('boom')"
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: retry, attempts: 3, delay: 600}
"""
RETRIED = """
workflow:
  - step: flaky
    spec: {retry: {max_attempts: 4, backoff: fixed, delay: 30, retry_on: [exception]}}
    tool: {kind: python, code: "result = 1"}
"""


def claimed(sim: Sim, worker: str = "w1", lease_end: float = NOW + 30) -> waiting.Facts:
    rows = {
        c.command_id: waiting.OpenCommand(
            c.command_id, waiting.CLAIMED_STATUS, worker, lease_end, c.pool
        )
        for c in sim.live()
    }
    return waiting.Facts(sim.now, rows, frozenset({"default"}))


def note(sim: Sim, cmd: st.Command, retry: TaskRetry, stale: bool = False) -> None:
    item = work_item(sim.state, sim.pb, cmd, epoch=1)
    (event,) = retry_note_events(item, retry, sim.new_id(), sim.now, "w1")
    if stale:
        event = ev.Event(**{**_fields(event), "meta": {**event.meta, "stale": True}})
    fl.fold(sim.state, [event])


def _fields(event: ev.Event) -> dict[str, Any]:
    return {name: getattr(event, name) for name in ev.Event.__dataclass_fields__}


def test_a_policy_retry_note_turns_a_claimed_command_into_a_retry_wait() -> None:
    sim = Sim(playbook(POLICY))
    (cmd,) = sim.live("flaky")
    assert [w.kind for w in waiting.waits(sim.state, sim.pb, claimed(sim))] == [waiting.CLAIMED]
    boom = {"kind": "exception", "message": "ValueError: boom"}
    note(sim, cmd, TaskRetry(None, boom, 2, 3, 600.0))
    (wait,) = waiting.waits(sim.state, sim.pb, claimed(sim))
    assert wait == waiting.Wait(
        waiting.POLICY_RETRY,
        "flaky",
        None,
        NOW + 600,
        2,
        3,
        boom,
        worker="w1",
        pool="default",
        command_id=str(cmd.command_id),
    )
    assert waiting.text(wait, NOW + 48) == (
        "retrying in 9m 12s, attempt 2 of 3, after: ValueError: boom"
    )
    assert waiting.text(wait, NOW + 601).startswith("retrying now, attempt 2 of 3")
    # the note changes no decision: the command stays the run's, its key the same
    assert sim.state.commands[cmd.command_id].idempotency_key == cmd.idempotency_key
    assert sim.settle() == []


def test_a_stale_or_late_note_changes_nothing() -> None:
    sim = Sim(playbook(POLICY))
    (cmd,) = sim.live("flaky")
    retry = TaskRetry(None, {"message": "x"}, 2, 3, 600.0)
    note(sim, cmd, retry, stale=True)  # from a lost claim: fenced
    assert sim.state.commands[cmd.command_id].retrying is None
    sim.complete("flaky", error={"kind": "exception", "message": "x"})
    note(sim, cmd, retry)  # after the attempt was settled
    assert waiting.waits(sim.state, sim.pb, claimed(sim)) == []


def test_a_spec_retry_timer_names_its_attempt_of_max_attempts_and_the_error() -> None:
    sim = Sim(playbook(RETRIED))
    sim.complete("flaky", error={"kind": "exception", "message": "ValueError: flaky"})
    (wait,) = waiting.waits(sim.state, sim.pb, waiting.Facts(NOW))
    assert (wait.kind, wait.step, wait.due_at, wait.attempt, wait.attempts) == (
        waiting.RETRY,
        "flaky",
        NOW + 30,
        2,
        4,
    )
    assert waiting.Wait.from_dict(wait.as_dict()) == wait


def test_a_loop_s_waits_are_one_per_kind_the_first_due_with_their_count() -> None:
    sim = Sim(
        playbook("""
    workflow:
      - step: each
        loop: {in: [1, 2, 3, 4], iterator: n, spec: {mode: parallel, max_in_flight: 4}}
        spec: {retry: {max_attempts: 2, backoff: fixed, delay: 30, retry_on: [exception]}}
        tool: {kind: python, code: "result = 1"}
    """)
    )
    first, second, *_ = sim.live("each")
    for cmd in (second, first):
        sim.report(cmd, error={"kind": "exception", "message": f"bad {cmd.index}"})
        sim.settle()
        sim.now += 5
    found = waiting.waits(sim.state, sim.pb, claimed(sim))
    assert [(w.kind, w.count) for w in found] == [(waiting.RETRY, 2), (waiting.CLAIMED, 2)]
    assert found[0].index == 1 and found[0].error == {"kind": "exception", "message": "bad 1"}


@given(
    hs.lists(
        hs.sampled_from(waiting.ORDER).flatmap(
            lambda kind: hs.builds(
                waiting.Wait,
                hs.just(kind),
                hs.sampled_from(["a", "b", None]),
                hs.none() | hs.integers(0, 5),
                hs.none() | hs.floats(0, 2000),
                hs.none() | hs.integers(1, 9),
                hs.none() | hs.integers(1, 9),
            )
        ),
        max_size=12,
    ),
    hs.floats(0, 2000),
)
def test_every_wait_reads_as_one_line_and_the_groups_keep_every_kind(
    found: list[waiting.Wait], now: float
) -> None:
    grouped = waiting._grouped(found)
    assert {(w.kind, w.step) for w in grouped} == {(w.kind, w.step) for w in found}
    assert sum(w.count for w in grouped) == len(found)
    ranks = [waiting.ORDER.index(w.kind) for w in grouped]
    assert ranks == sorted(ranks)
    for wait in grouped:
        line = waiting.text(wait, now)
        assert line and "\n" not in line and "None" not in line


# -- the runner: a failed task that a policy retries is reported before the wait ------------


def test_the_runner_reports_each_policy_retry_of_a_failed_task_with_its_logs_once() -> None:
    pb = attempt_playbook("""
    workflow:
      - step: x
        tool:
          - name: fetch
            kind: python
            code: fetch
            spec:
              policy:
                rules:
                  - when: "{{ output.status == 'error' }}"
                    then: {do: retry, attempts: 3, backoff: fixed, delay: 600}
    """)
    printed = (logs.Captured(logs.TRACEBACK, "Traceback: boom\n"),)
    tools = FakeTools(
        fetch=[
            ToolResult(data=None, error=err().error, logs=printed),
            ToolResult(data=None, error=err().error, logs=printed),
            ok({"n": 1}, logs=(logs.Captured(logs.STDOUT, "done\n"),)),
        ]
    )
    notes: list[TaskRetry] = []
    sleep = FakeSleep()
    out = run(pb, attempt_item(), tools, sleep, on_retry=notes.append)
    assert out.ok and sleep.delays == [600.0, 600.0]
    assert [(n.task, n.attempt, n.attempts, n.delay) for n in notes] == [
        ("fetch", 2, 3, 600.0),
        ("fetch", 3, 3, 600.0),
    ]
    assert notes[0].error["message"] == "HTTP 500 from GET http://h/x"
    assert [n.logs for n in notes] == [printed, printed]
    # what the notes carried is not reported again with the attempt
    assert out.logs == (logs.Captured(logs.STDOUT, "done\n"),)


def test_without_a_listener_the_attempt_reports_every_execution_s_logs() -> None:
    pb = attempt_playbook(POLICY.replace("flaky", "x"))
    printed = (logs.Captured(logs.STDERR, "warn\n"),)
    tools = FakeTools(t1=ToolResult(data=None, error=err().error, logs=printed))
    code = "raise ValueError('boom')"
    tools.script[code] = tools.script.pop("t1")
    out = run(pb, attempt_item(), tools, FakeSleep())
    assert not out.ok
    assert out.logs == (logs.Captured(logs.STDERR, "warn\n" * 3),)
