"""Events the contract tests append by hand: ids from one counter, a command issued."""

from __future__ import annotations

import itertools
from typing import Any

from milepost.core import events as ev

_ids = itertools.count(50_000)


def new_id() -> int:
    """An event or command id no other event of the test has."""
    return next(_ids)


def event(xid: int, etype: str, step: str | None = "s", **payload: Any) -> ev.Event:
    return ev.new_event(new_id(), xid, etype, 100.0, step=step, payload=payload)


def issued(xid: int, cid: int, **extra: Any) -> ev.Event:
    """`command.issued` of command `cid` (run 1, attempt 1) of step `s`; `extra`: more payload
    (a step's `lease_s`)."""
    return event(
        xid,
        ev.COMMAND_ISSUED,
        command_id=cid,
        run=1,
        index=-1,
        attempt=1,
        idempotency_key=f"k{cid}",
        **extra,
    )
