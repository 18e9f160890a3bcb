"""Wake-up messages: one per pool per call, a lone notice in its own shape."""

from __future__ import annotations

import json

from milepost.engine.notify import Notice, messages


def test_a_lone_notice_keeps_its_shape() -> None:
    [(subject, body, count)] = messages([Notice(7, 70)])
    assert subject == "milepost.commands.default" and count == 1
    assert json.loads(body) == {"command_id": "7", "execution_id": "70"}


def test_notices_of_one_call_go_in_one_message_per_pool() -> None:
    out = messages([Notice(1, 10), Notice(2, 10, "gpu"), Notice(3, 11)])
    assert [(s, n) for s, _, n in out] == [("milepost.commands.default", 2),
                                           ("milepost.commands.gpu", 1)]  # fmt: skip
    assert json.loads(out[0][1]) == {"commands": [
        {"command_id": "1", "execution_id": "10"}, {"command_id": "3", "execution_id": "11"}]}
    assert json.loads(out[1][1]) == {"command_id": "2", "execution_id": "10"}
    assert messages([]) == []
