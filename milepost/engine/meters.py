"""What the engine service counts, without knowing who reads the counts.

The server hands in an adapter over its Prometheus metrics; the embedded mode counts
nothing (`Meters` itself: every hook does nothing).
"""

from __future__ import annotations


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
