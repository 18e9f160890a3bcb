"""The wire codec (milepost.wire): a command encoded from the state as the server sends it
decodes, after a trip through JSON, into the work item the state would give in-process."""

from __future__ import annotations

import json
from typing import Any

from milepost import wire
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core.work import work_item
from milepost.playbook.loop_result import LoopResult
from tests.unit.sim import Sim, playbook

PB = playbook("""\
    workflow:
      - step: start
        loop: {in: "{{ [1, 2, 3] }}", iterator: i}
        tool: {kind: noop}
        next: total
      - step: total
        tool: {kind: python, input: {n: "{{ start | length }}"}, code: "result = n"}
    """)


def _encoded(state: st.ExecutionState, command: st.Command, epoch: int) -> dict[str, Any]:
    item = work_item(state, PB, command, epoch)
    return {
        "command_id": str(command.command_id),
        "execution_id": str(state.execution_id),
        "step": command.step,
        "run": command.run,
        "index": command.index,
        "attempt": command.attempt,
        "idempotency_key": command.idempotency_key,
        "context": wire.plain(item.context),
        "loop_steps": wire.loop_steps(state, PB, item.context),
        "args": wire.plain(item.args),
        "lease": {"epoch": epoch},
        "traceparent": item.traceparent,
    }


def test_a_command_survives_the_wire_loop_results_and_their_failures_included() -> None:
    sim = Sim(PB)
    while sim.live("start"):
        cmd = sim.live("start")[0]
        sim.report(cmd, cmd.index * 10)
    [total] = sim.live("total")
    # a policy that let one iteration's error through leaves a failed count on the result
    sim.state.results["start"] = LoopResult(sim.state.results["start"], failed=1)
    sent = json.loads(json.dumps(_encoded(sim.state, total, epoch=3)))
    assert sent["loop_steps"] == {"start": {"failed": 1}}
    item = wire.work_item_from_wire(sent)
    expected = work_item(sim.state, PB, total, 3)
    assert item == expected
    assert isinstance(item.context["start"], LoopResult)
    assert item.context["start"].stats == {"total": 3, "success": 2, "failed": 1}


def test_a_report_event_carries_its_epoch_and_parent_as_strings() -> None:
    event = ev.new_event(
        901,
        77,
        ev.COMMAND_COMPLETED,
        1000.5,
        step="start",
        worker_id="w",
        payload={"command_id": 5, "result": {"at": 1.5}, "ctx": {}},
        meta={"duration_ms": 2.0},
    )
    sent = wire.event_to_wire(event, 7, 5)
    assert sent["meta"] == {"duration_ms": 2.0, "epoch": 7}
    assert (sent["event_id"], sent["execution_id"], sent["parent_event_id"]) == ("901", "77", "5")
    assert sent["result"] == event.envelope_result() and sent["created_at"] == 1000.5
    assert json.loads(json.dumps(sent)) == sent


def test_jsonable_turns_what_json_cannot_carry_into_text() -> None:
    assert wire.jsonable({"a": (1, 2), "b": {1, 2} and "x", "c": object}) == {
        "a": [1, 2],
        "b": "x",
        "c": str(object),
    }


COMPENSATED = playbook("""\
    workflow:
      - step: start
        loop: {in: "{{ [1, 2] }}", iterator: i}
        tool: {kind: noop}
        spec: {compensation: undo}
        next: boom
      - step: boom
        tool: {kind: noop}
      - step: undo
        tool: {kind: python, input: {s: "{{ compensation.result.stats }}"}, code: "result = s"}
    """)


def test_a_compensation_s_loop_result_keeps_its_stats_across_the_wire() -> None:
    sim = Sim(COMPENSATED)
    while sim.live("start"):
        sim.report(sim.live("start")[0], "done")
    sim.report(sim.live("boom")[0], error={"kind": "http", "message": "refused"})
    [undo] = sim.live("undo")
    item = work_item(sim.state, COMPENSATED, undo, 1)
    assert isinstance(item.context["compensation"]["result"], LoopResult)
    sent = json.loads(
        json.dumps(
            {
                "command_id": str(undo.command_id),
                "execution_id": str(sim.state.execution_id),
                "step": undo.step,
                "context": wire.plain(item.context),
                "loop_steps": wire.loop_steps(sim.state, COMPENSATED, item.context),
            }
        )
    )
    received = wire.work_item_from_wire(sent).context["compensation"]
    assert isinstance(received["result"], LoopResult)
    assert received["result"].stats == {"total": 2, "success": 2, "failed": 0}
    assert received["step"] == "start" and received["run"] == 1


def test_jsonable_turns_a_nan_or_an_infinity_into_null() -> None:
    """A python step returning NaN on a server hung its run: the worker sent `NaN`, which
    the server refuses (no JSON has it), and the report was never taken."""
    value = {
        "x": float("nan"),
        "y": [float("inf"), -float("inf"), 1.5],
        "z": {"k": (float("nan"),)},
    }
    assert wire.jsonable(value) == {"x": None, "y": [None, None, 1.5], "z": {"k": [None]}}
    assert json.dumps(wire.jsonable(value), allow_nan=False)


def test_a_gated_command_carries_its_approved_digest_and_expiry_across_the_wire() -> None:
    """What the attempt checks before its tool runs reaches a remote worker as it reaches
    an in-process one (the expiry as ISO-8601, to the millisecond below: never later)."""
    from milepost.api import views
    from milepost.core import approvals
    from milepost.core.approval_state import Voter
    from milepost.store import port

    gated = playbook("""\
        workflow:
          - step: pay
            tool: {kind: http, method: POST, url: "https://pay.example", json: {n: 1}}
            spec: {approval: {approvers: [user:alice], expires_in: 90s}}
        """)
    sim = Sim(gated, now=1_764_600_000.1237)
    (approval,) = sim.state.approvals.values()
    fl.fold(
        sim.state,
        [
            approvals.vote_event(
                sim.state, approval.approval_id, Voter("user:alice"), "approve", None, sim.now, 99
            )
        ],
    )
    sim.settle()
    [cmd] = sim.live("pay")
    row = port.CommandRow(
        cmd.command_id, 77, "pay", 1, -1, 1, cmd.idempotency_key, "queued", None, 0, None, sim.now
    )
    sent = json.loads(views.command_out(sim.state, gated, row).model_dump_json())
    assert sent["approval_expires_at"] == "2025-12-01T14:41:30.123+00:00"
    item = wire.work_item_from_wire(sent)
    expected = work_item(sim.state, gated, cmd)
    assert item.approved_digest == expected.approved_digest == approval.calls[0]["digest"]
    assert expected.approval_expires_at == approval.expires_at == sim.now + 90
    assert item.approval_expires_at == 1_764_600_090.123
