"""The runs list's change stream (`GET /api/executions/stream`) reports a run's progress,
not only its start and end: a step's exit, and each change of one of its approvals, moves
the run's row up the stream (never back, never on an ended run), and each look at the
store is one read of the index, less the rows already sent."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx2

from milepost.api.routers import runs_stream, stream
from milepost.core import events as ev
from milepost.store import port, projection
from tests.api.support import HELLO, Api, live_server, ok, report_wire
from tests.api.test_approvals import People, gated
from tests.api.test_runs_list import Follower
from tests.shared import wait_for


def _counted(api: Api, monkeypatch: Any) -> list[tuple[float, int]]:
    """The `after` of every read of the changed rows."""
    engine = api.services.engine
    read = engine.changed_executions
    asked: list[tuple[float, int]] = []

    def counting(after: tuple[float, int], limit: int) -> Any:
        asked.append(after)
        return read(after, limit)

    monkeypatch.setattr(engine, "changed_executions", counting)
    return asked


def test_a_steps_exit_moves_its_run_up_the_stream_with_its_progress(
    api: Api, monkeypatch: Any
) -> None:
    asked = _counted(api, monkeypatch)
    engine = api.services.engine
    xid = api.execute(HELLO)
    origin = (0.0, 0)
    [(key, row)] = runs_stream._look(engine, origin, origin, {})
    assert (row.execution_id, row.status, row.steps_done, row.steps_total) == (xid, "RUNNING", 0, 2)
    assert runs_stream._look(engine, origin, key, {key: None}) == []  # nothing new: nothing
    api.complete(api.claim_one(), {"greeting": "hi"})  # the first step exits
    [(moved, row)] = runs_stream._look(engine, origin, key, {key: None})
    assert moved > key and (row.execution_id, row.status, row.steps_done) == (xid, "RUNNING", 1)
    assert len(asked) == 3  # one read per look
    api.complete(api.claim_one())  # the last step: its exit and the run's end
    [(ended, row)] = runs_stream._look(engine, origin, moved, {key: None, moved: None})
    assert ended > moved and (row.status, row.steps_done) == ("COMPLETED", 2)
    assert len(asked) == 4


def test_a_full_window_of_rows_sent_is_read_past_not_stuck_on(api: Api, monkeypatch: Any) -> None:
    monkeypatch.setattr(stream, "PAGE", 2)
    asked = _counted(api, monkeypatch)
    engine = api.services.engine
    for _ in range(3):
        api.execute(HELLO)
    origin = (0.0, 0)
    first = runs_stream._look(engine, origin, origin, {})
    assert len(first) == 2  # a page: the stream reads the next one at once
    sent = {key: None for key, _ in first}
    second = runs_stream._look(engine, origin, first[-1][0], sent)
    sent.update({key: None for key, _ in second})
    assert len(second) == 1 and len(sent) == 3
    asked.clear()
    late = api.execute(HELLO)
    # the window behind the cursor holds a full page already sent: the next page has it
    [(_, row)] = runs_stream._look(engine, origin, second[-1][0], sent)
    assert row.execution_id == late and len(asked) == 2


def test_each_change_of_an_approval_moves_its_run_up_the_stream(api: Api) -> None:
    people = People(api)
    for user in ("alice", "bob"):
        people.add(user)
    people.add("dora", "admin")
    engine = api.services.engine
    xid = people.execute(gated(approvers="[user:alice, user:bob]"), "dora")
    origin = (0.0, 0)
    [(key, row)] = runs_stream._look(engine, origin, origin, {})
    assert row.execution_id == xid
    [approval] = ok(api.get(f"/api/approvals?execution_id={xid}"))["items"]
    sent = {key: None}
    for user, status in (("alice", "pending"), ("bob", "granted")):  # a vote, then the close
        assert ok(people.decide(approval["approval_id"], user))["status"] == status
        [(moved, row)] = runs_stream._look(engine, origin, key, sent)
        assert moved > key and (row.execution_id, row.status) == (xid, "RUNNING")
        key, sent = moved, {**sent, moved: None}


def _row(status: str, updated: float) -> port.ExecutionRow:
    return port.ExecutionRow(7, "tests/hello", 1, status, 1.0, updated, None)


def _exit(at: float) -> ev.Event:
    return ev.new_event(99, 7, ev.STEP_EXIT, at, step="start")


def test_a_step_exit_never_moves_an_ended_run_nor_a_row_back() -> None:
    change = projection.changes([_exit(5.0), _exit(6.0)])
    assert change.progressed == [(6.0, 7, 6.0)]  # one move per run per batch: its last exit
    for before, after in [
        (_row("RUNNING", 2.0), 6.0),
        (_row("RUNNING", 9.0), 9.0),
        (_row("COMPLETED", 3.0), 3.0),
    ]:
        rows = {7: before}
        projection.apply(change, rows, {})
        assert rows[7] == dataclasses.replace(before, updated_at=after)


def test_the_runs_page_sees_a_steps_progress_live(db_url: str, monkeypatch: Any) -> None:
    monkeypatch.setattr(stream, "KEEPALIVE", 0.0)  # a line every look: a stopped reader leaves
    with live_server(db_url) as server:
        follower = Follower(server)
        wait_for(lambda: follower.status is not None, "the stream to open")
        xid = server.execute()
        wait_for(lambda: follower.seen(xid, "RUNNING"), "the new run on the stream")
        [command] = _claim(server)
        ok(
            httpx2.post(
                f"{server.url}/api/events/batch",
                headers=server.headers("worker"),
                json={"events": report_wire(command, {"greeting": "hi"})},
                timeout=10,
            )
        )
        wait_for(
            lambda: any(
                r["execution_id"] == xid and r["status"] == "RUNNING" and r["steps_done"] == 1
                for r in follower.rows()
            ),
            "the first step's exit on the stream",
        )
        follower.stop.set()


def _claim(server: Any) -> list[dict[str, Any]]:
    reply = ok(
        httpx2.post(
            f"{server.url}/api/commands/claim",
            json={"worker_id": "w1"},
            headers=server.headers("worker"),
            timeout=10,
        )
    )
    return list(reply["commands"])
