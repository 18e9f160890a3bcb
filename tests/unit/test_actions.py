"""An operator's actions on the engine service over the in-memory store (no worker: the
test reports each command): retry, skip, restart, re-run, each an event naming who acted,
and their refusals (`core.actions`)."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from milepost import ids
from milepost.core import actions as acts
from milepost.core import compensation_state as cs
from milepost.core import events as ev
from milepost.core import final_step_state as fs
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.engine import actions
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.orchestrator import Orchestrator
from milepost.playbook import load
from milepost.store.memory import MemoryStore

FLOW = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: ops, path: tests/ops}
    workload: {n: 5}
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
        set: {ctx.first: "{{ start }}"}
        next: flaky
      - step: flaky
        tool: {kind: python, code: "result = 2"}
        spec: {retry: {max_attempts: 2, delay: 600, retry_on: [exception]}}
        next: [{step: end, args: {got: "{{ flaky }}"}}]
      - step: end
        tool: {kind: python, code: "result = 3"}
    """)
BOOM = {"kind": "exception", "message": "boom"}


class World:
    def __init__(self, text: str = FLOW) -> None:
        self.now = 1000.0
        self.store = MemoryStore()
        self.service = Lifecycle(
            self.store, Orchestrator(self.store, clock=lambda: self.now, machine_id=1)
        )
        pb = load.load_text(text)
        _, version = self.service.register(text, pb)
        self.xid, _ = self.service.start(pb, version, {"n": 7}, started_by="user:ann")

    def state(self, xid: int | None = None) -> st.ExecutionState:
        return self.service.read(xid or self.xid, lambda s, _: fl.clone(s))

    def live(self, step: str, xid: int | None = None) -> list[st.Command]:
        return [c for c in self.state(xid).commands.values() if c.step == step]

    def report(
        self,
        step: str,
        result: Any = None,
        error: dict[str, Any] | None = None,
        xid: int | None = None,
    ) -> None:
        (cmd,) = self.live(step, xid)
        payload: dict[str, Any] = {
            "command_id": cmd.command_id,
            "run": cmd.run,
            "index": cmd.index,
            "attempt": cmd.attempt,
        }
        payload.update({"error": error} if error else {"result": result})
        etype = ev.COMMAND_FAILED if error else ev.COMMAND_COMPLETED
        self.service.process(
            [
                ev.new_event(
                    self.service.new_id(),
                    xid or self.xid,
                    etype,
                    self.now,
                    step=step,
                    payload=payload,
                )
            ]
        )

    def events(self, etype: str, xid: int | None = None) -> list[ev.Event]:
        return [e for e in self.service.events(xid or self.xid) if e.event_type == etype]


def failed_and_waiting() -> World:
    world = World()
    world.report("start", 1)
    world.report("flaky", error=BOOM)  # attempt 2 waits 600 s
    assert world.state().running["flaky"].retry_at
    return world


def test_retry_issues_the_waiting_attempt_now_with_a_new_key_and_the_same_operation() -> None:
    world = failed_and_waiting()
    acted = actions.retry(world.service, world.xid, "flaky", "user:bob", "the API is back")
    assert (acted.action, acted.actor, acted.step_status) == ("retry", "user:bob", "RUNNING")
    (cmd,) = world.live("flaky")
    assert acted.issued == [{"command_id": cmd.command_id, "index": -1, "attempt": 2}]
    (event,) = world.events(ev.STEP_RETRY_REQUESTED)
    assert event.payload["actor"] == "user:bob" and event.meta["actor"] == "user:bob"
    assert event.payload["reason"] == "the API is back"
    assert cmd.idempotency_key == ids.idempotency_key(world.xid, "flaky", 1, None, 2)
    assert cmd.idempotency_key != ids.idempotency_key(world.xid, "flaky", 1, None, 1)
    world.report("flaky", 2)
    world.report("end", 3)
    assert world.state().status == st.COMPLETED


def test_retry_stops_a_live_attempt_and_its_late_report_is_stale() -> None:
    world = World()
    world.report("start", 1)
    (old,) = world.live("flaky")
    acted = actions.retry(world.service, world.xid, "flaky", "user:bob")
    assert acted.stopped == [old.command_id]
    assert world.store.get_command(old.command_id).status == "failed"  # its claim is gone
    (new,) = world.live("flaky")
    assert new.attempt == 2
    late = ev.new_event(
        world.service.new_id(),
        world.xid,
        ev.COMMAND_COMPLETED,
        world.now,
        step="flaky",
        payload={"command_id": old.command_id, "run": 1, "index": -1, "attempt": 1, "result": 9},
    )
    world.service.process([late])
    assert world.live("flaky") == [new] and world.state().step_status["flaky"] == "RUNNING"


def test_skip_completes_the_step_with_the_result_and_the_run_goes_on_from_it() -> None:
    world = failed_and_waiting()
    acted = actions.skip(world.service, world.xid, "flaky", {"v": 42}, "user:bob")
    assert (acted.action, acted.step_status) == ("skip", "COMPLETED")
    state = world.state()
    assert state.results["flaky"] == {"v": 42}
    assert state.running["end"].args == {"got": {"v": 42}}  # its arc rendered the result
    (event,) = world.events(ev.STEP_SKIP_REQUESTED)
    assert event.payload["actor"] == "user:bob" and event.payload["result"] == {"v": 42}
    world.report("end", 3)
    assert world.state().status == st.COMPLETED


def test_skip_of_a_step_not_yet_started_and_of_a_loop() -> None:
    loop = FLOW.replace(
        'tool: {kind: python, code: "result = 2"}',
        'loop: {in: "{{ [1, 2] }}", iterator: i}\n    tool: {kind: python, code: "result = 2"}',
    )
    world = World(loop)
    world.report("start", 1)
    with pytest.raises(acts.InvalidResult):
        actions.skip(world.service, world.xid, "flaky", 5, "user:bob")
    actions.skip(world.service, world.xid, "flaky", [7, 8], "user:bob")
    assert list(world.state().results["flaky"]) == [7, 8]
    assert not world.live("flaky")
    with pytest.raises(acts.StepNotActive) as refused:
        actions.skip(world.service, world.xid, "start", 1, "user:bob")
    assert refused.value.fields["status"] == "COMPLETED"


def test_refusals_name_what_is_wrong_and_append_nothing() -> None:
    world = World()
    world.report("start", 1)
    before = len(world.service.events(world.xid))
    with pytest.raises(acts.StepNotFound):
        actions.retry(world.service, world.xid, "nope", "user:bob")
    with pytest.raises(acts.NothingToRetry):
        actions.retry(world.service, world.xid, "end", "user:bob")
    with pytest.raises(acts.NotRestartable):
        actions.restart(world.service, world.xid, None, "user:bob")
    assert len(world.service.events(world.xid)) == before
    world.report("flaky", error={"kind": "fatal", "message": "no"})  # not retried: fails
    assert world.state().status == st.FAILED
    with pytest.raises(acts.RunEnded) as ended:
        actions.retry(world.service, world.xid, "flaky", "user:bob")
    assert ended.value.code == "execution_terminal" and ended.value.fields["use"] == "restart"
    assert "milepost restart" in ended.value.message


def test_restart_reuses_the_results_before_the_step_and_links_both_ways() -> None:
    world = World()
    world.report("start", 1)
    world.report("flaky", error={"kind": "fatal", "message": "no"})
    assert world.state().status == st.FAILED
    started = actions.restart(world.service, world.xid, None, "user:bob")  # the failed step
    new = started.execution_id
    assert started.origin.started["restart"]["from_step"] == "flaky"
    state = world.state(new)
    assert state.restarted_from == world.xid and state.started_by == "user:bob"
    assert state.workload == {"n": 7}  # the same inputs
    assert state.results["start"] == 1 and state.ctx["first"] == 1
    (reused,) = world.events(ev.STEP_REUSED, new)
    assert reused.step == "start" and reused.payload["from_execution"] == str(world.xid)
    assert [e.step for e in world.events(ev.COMMAND_ISSUED, new)] == ["flaky"]  # start not run
    world.report("flaky", 2, xid=new)
    world.report("end", 3, xid=new)
    assert world.state(new).status == st.COMPLETED
    assert world.state().status == st.FAILED  # the old run never moves
    assert actions.links(world.service, world.xid)["restarts"] == [str(new)]
    assert actions.links(world.service, new)["restarted_from"] == str(world.xid)


def test_restart_from_a_named_step_and_rerun() -> None:
    world = World()
    world.report("start", 1)
    world.service.cancel(world.xid, "user:ann")  # flaky's queued command settled with it
    assert world.state().status == st.CANCELLED
    again = actions.restart(world.service, world.xid, "start", "user:bob").execution_id
    assert [e.step for e in world.events(ev.COMMAND_ISSUED, again)] == ["start"]
    assert not world.events(ev.STEP_REUSED, again)
    rerun = actions.rerun(world.service, world.xid, "user:bob")
    state = world.state(rerun.execution_id)
    assert state.workload == {"n": 7} and state.restarted_from is None
    (started,) = world.events(ev.EXECUTION_STARTED, rerun.execution_id)
    assert started.payload["rerun_of"] == str(world.xid)
    assert started.payload["started_by"] == "user:bob"


def test_a_step_run_the_old_run_compensated_is_not_reused() -> None:
    world = World()
    world.report("start", 1)
    world.report("flaky", error={"kind": "fatal", "message": "no"})
    state = world.state()
    pb = world.service.playbook(state.path, state.version or 0)
    log = world.service.events(world.xid)
    assert [s for s, _ in acts.restart(state, log, pb, None, "user:bob").reused] == ["start"]
    state.compensation = fs.Compensation(
        st.FAILED,
        [
            fs.CompensationItem(
                step="start", run=1, target="undo", target_run=1, status=cs.COMPLETED
            )
        ],
    )
    assert acts.restart(state, log, pb, None, "user:bob").reused == []
