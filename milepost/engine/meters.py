"""What the engine service counts, without knowing who reads the counts.

The server hands in an adapter over its Prometheus metrics; the embedded mode counts
nothing (`Meters` itself: every hook does nothing).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from milepost.core import events as ev
from milepost.store import port

if TYPE_CHECKING:
    from milepost.engine.orchestrator import Outcome

APPROVAL_OUTCOMES = {
    ev.APPROVAL_GRANTED: "granted",
    ev.APPROVAL_DENIED: "denied",
    ev.APPROVAL_EXPIRED: "expired",
    ev.APPROVAL_INVALIDATED: "invalidated",
}
"""The events that close an approval, and the `outcome` label each counts under."""


class Meters:
    def issued(self, count: int) -> None:
        """Commands issued by a decision."""

    def claimed(self, count: int) -> None:
        """Claims granted to workers."""

    def claim_refused(self, code: str) -> None:
        """A claim refused, by its reason."""

    def settled(self, outcome: str) -> None:
        """A command report folded: `completed` or `failed`."""

    def engine_errors(self, count: int) -> None:
        """Runs ended FAILED because deciding raised."""

    def evaluated(self, seconds: float) -> None:
        """One orchestrator call: fold, decide and the transaction that stores both."""

    def lease_expired(self) -> None:
        """A claim the reconciler found expired."""

    def run_stalled(self) -> None:
        """A run failed for making no progress for its `executor.spec.stall_after`."""

    def attempt_failed(self, kind: str) -> None:
        """An attempt failed by `timeout` or `lost` (`engine.liveness_meter`)."""

    def approval_closed(self, outcome: str, seconds: float | None) -> None:
        """An approval reached its outcome (granted, denied, expired, invalidated), after
        `seconds` from its request (None: the request could not be found)."""

    def used(self, playbook: str, provider: str, model: str, tokens: int, cost: float) -> None:
        """A report's usage (DSL 10.6): its tokens (input + output) and cost."""


class ApprovalClock:
    """A listener of the engine service: each approval outcome, with the time since its
    request, into the meters.

    The time is the outcome event's `created_at` minus the request's. The request times
    this process committed are kept (a few thousand at most, the oldest forgotten first);
    a request it did not see (another server wrote it, or this one restarted since) is
    read from the store's approval row.
    """

    def __init__(self, meters: Meters, store: port.Store, *, keep: int = 10_000) -> None:
        self.meters = meters
        self.store = store
        self.keep = keep
        self._requested: OrderedDict[int, float] = OrderedDict()

    def __call__(self, outcome: Outcome) -> None:
        self.observe(outcome.events)

    def observe(self, events: list[ev.Event]) -> None:
        for event in events:
            if event.event_type == ev.APPROVAL_REQUESTED:
                self._requested[event.event_id] = event.created_at
                if len(self._requested) > self.keep:
                    self._requested.popitem(last=False)
                continue
            label = APPROVAL_OUTCOMES.get(event.event_type)
            if label is None or "attempt" in event.payload:
                # an invalidation naming an attempt refused one after the grant: the
                # approval was decided (and counted) when it was granted
                continue
            approval_id = _approval_id(event)
            requested = None if approval_id is None else self._requested.pop(approval_id, None)
            if requested is None and approval_id is not None:
                requested = self._read(approval_id)
            seconds = None if requested is None else max(0.0, event.created_at - requested)
            self.meters.approval_closed(label, seconds)

    def _read(self, approval_id: int) -> float | None:
        row = self.store.get_approval(approval_id)  # one row, rebuilt from the log like it
        return None if row is None else row.requested_at


def _approval_id(event: ev.Event) -> int | None:
    value = event.payload.get("approval_id")
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None
