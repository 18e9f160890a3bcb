"""The engine's half of tracing: the span of each run, emitted when the run ends.

A listener of the engine service (`Lifecycle.listeners`), installed only when this
process exports spans (`milepost.telemetry`): it sees each call's committed events and
emits the run span of every execution whose terminal event is among them, with the
run's start from the log (the fold's `started_at`). A run's end is committed once, so
its span is emitted once, whichever process ended it.
"""

from __future__ import annotations

from milepost.core import events as ev
from milepost.engine.orchestrator import Outcome
from milepost.telemetry import Telemetry


class RunSpans:
    def __init__(self, spans: Telemetry) -> None:
        self.spans = spans

    def __call__(self, outcome: Outcome) -> None:
        ended = {
            e.execution_id for e in outcome.events if e.event_type in ev.TERMINAL_EXECUTION_EVENTS
        }
        if not ended:
            return
        for state in outcome.finished:
            if state.execution_id in ended:
                ended.discard(state.execution_id)  # once, though a state is listed twice
                self.spans.run(state)
