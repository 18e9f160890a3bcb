"""Usage into the meters (DSL 10.6): a listener of the engine service counting the tokens
and cost of every committed report by playbook, provider and model.

Counted from the events the service committed (not from the store's totals), so each
report counts once, on the server that stored it. A report's playbook is its run's path:
from the `execution.started` of the same outcome, else remembered, else read from the
execution's row.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from milepost.core import events as ev
from milepost.store import port, usage

if TYPE_CHECKING:
    from milepost.engine.meters import Meters
    from milepost.engine.orchestrator import Outcome


class UsageMeter:
    def __init__(self, meters: Meters, store: port.Store, *, keep: int = 10_000) -> None:
        self.meters = meters
        self.store = store
        self.keep = keep
        self._paths: OrderedDict[int, str] = OrderedDict()

    def __call__(self, outcome: Outcome) -> None:
        self.observe(outcome.events)

    def observe(self, events: list[ev.Event]) -> None:
        for event in events:
            if event.meta.get("stale"):
                continue  # the fold and the store count it for nothing either
            if event.event_type == ev.EXECUTION_STARTED:
                self._remember(event.execution_id, str(event.payload.get("path", "")))
                continue
            for xid, provider, model, tokens_in, tokens_out, cost in usage.ops(event):
                self.meters.used(self._path(xid), provider, model, tokens_in + tokens_out, cost)

    def _path(self, execution_id: int) -> str:
        path = self._paths.get(execution_id)
        if path is None:
            row = self.store.get_execution(execution_id)
            path = row.path if row is not None else ""
            self._remember(execution_id, path)
        return path

    def _remember(self, execution_id: int, path: str) -> None:
        self._paths[execution_id] = path
        self._paths.move_to_end(execution_id)
        if len(self._paths) > self.keep:
            self._paths.popitem(last=False)
