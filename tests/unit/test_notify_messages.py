"""Wake-up messages: one per pool per call, a lone notice in its own shape; a cancel's
announcement."""

from __future__ import annotations

import json
from collections.abc import Sequence

from milepost.core import events as ev
from milepost.engine import notify
from milepost.engine.notify import Notice, messages
from milepost.engine.orchestrator import Outcome


def test_a_lone_notice_keeps_its_shape() -> None:
    [(subject, body, count)] = messages([Notice(7, 70)])
    assert subject == "milepost.commands.default" and count == 1
    assert json.loads(body) == {"command_id": "7", "execution_id": "70"}


def test_notices_of_one_call_go_in_one_message_per_pool() -> None:
    out = messages([Notice(1, 10), Notice(2, 10, "gpu"), Notice(3, 11)])
    assert [(s, n) for s, _, n in out] == [
        ("milepost.commands.default", 2),
        ("milepost.commands.gpu", 1),
    ]
    assert json.loads(out[0][1]) == {
        "commands": [
            {"command_id": "1", "execution_id": "10"},
            {"command_id": "3", "execution_id": "11"},
        ]
    }
    assert json.loads(out[1][1]) == {"command_id": "2", "execution_id": "10"}
    assert messages([]) == []


def test_a_committed_cancel_request_is_announced_on_the_cancels_subject() -> None:
    announced: list[list[int]] = []

    class Recorder(notify.NullPublisher):
        def notify_cancelled(self, execution_ids: Sequence[int]) -> None:
            announced.append(list(execution_ids))

    listener = notify.CancelNotices(Recorder())
    listener(Outcome(events=[ev.new_event(1, 5, ev.STEP_ENTER, 1.0, step="s", payload={"run": 1})]))
    assert announced == []
    listener(
        Outcome(
            events=[
                ev.new_event(2, 5, ev.EXECUTION_CANCEL_REQUESTED, 1.0),
                ev.new_event(3, 6, ev.EXECUTION_CANCEL_REQUESTED, 1.0),
            ]
        )
    )
    assert announced == [[5, 6]]
    assert notify.cancel_message([5, 6]) == (
        "milepost.cancels",
        b'{"execution_ids": ["5", "6"]}',
        0,
    )
