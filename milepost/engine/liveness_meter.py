"""Stalls and unfinished attempts into the meters: a listener of the engine service
counting the runs failed as `stalled` and the attempts failed by `timeout` (the step's
own, reported by its worker, or the engine's default) or lost (their lease expired).

Counted from the events the service committed, so each counts once, on the server that
stored it, whoever decided it (the reconciler, a worker's report).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from milepost.core import events as ev
from milepost.core.liveness import STALLED

if TYPE_CHECKING:
    from milepost.engine.meters import Meters
    from milepost.engine.orchestrator import Outcome

LOST = "lost"
TIMEOUT = "timeout"
ATTEMPT_KINDS = (TIMEOUT, LOST)
"""The `kind` labels of `milepost_attempts_failed`."""


class LivenessMeter:
    def __init__(self, meters: Meters) -> None:
        self.meters = meters

    def __call__(self, outcome: Outcome) -> None:
        self.observe(outcome.events)

    def observe(self, events: list[ev.Event]) -> None:
        for event in events:
            if event.meta.get("stale"):
                continue  # the fold counts it for nothing either
            error = event.payload.get("error")
            kind = error.get("kind") if isinstance(error, dict) else None
            if event.event_type == ev.COMMAND_LEASE_EXPIRED:
                self.meters.attempt_failed(LOST)
            elif event.event_type == ev.COMMAND_FAILED and kind == TIMEOUT:
                self.meters.attempt_failed(TIMEOUT)
            elif event.event_type == ev.EXECUTION_FAILED and kind == STALLED:
                self.meters.run_stalled()
