"""Prometheus metrics of one app (a registry per app, so tests and apps never share counts)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from milepost.engine.liveness_meter import ATTEMPT_KINDS
from milepost.engine.meters import APPROVAL_OUTCOMES, Meters

INGEST_OUTCOMES = ("stored", "duplicate", "stale", "rejected")
USAGE_LABELS = ("playbook", "provider", "model")
APPROVAL_BUCKETS = (
    1.0,
    10.0,
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    4 * 3600.0,
    12 * 3600.0,
    24 * 3600.0,
    3 * 86400.0,
    7 * 86400.0,
    float("inf"),
)
"""People decide in minutes to days (a machine in seconds): the default buckets stop at 10 s."""


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.events_ingested = Counter(
            "milepost_events_ingested",
            "Events posted to the API, by type and outcome (stored, duplicate, stale, rejected).",
            ["event_type", "outcome"],
            registry=r,
        )
        self.ingest_seconds = Histogram(
            "milepost_event_ingest_seconds",
            "Time to validate, store and process one POST of events.",
            registry=r,
        )
        self.commands_issued = Counter(
            "milepost_commands_issued", "Commands issued by the orchestrator.", registry=r
        )
        self.commands_claimed = Counter(
            "milepost_commands_claimed", "Claims granted to workers.", registry=r
        )
        self.commands_completed = Counter(
            "milepost_commands_completed",
            "Command reports folded, by outcome (completed, failed).",
            ["outcome"],
            registry=r,
        )
        self.claim_conflicts = Counter(
            "milepost_claim_conflicts", "Claims refused, by code.", ["code"], registry=r
        )
        self.leases_expired = Counter(
            "milepost_leases_expired", "Claims the reconciler found expired.", registry=r
        )
        self.runs_stalled = Counter(
            "milepost_runs_stalled",
            "Runs failed for making no progress for their executor.spec.stall_after.",
            registry=r,
        )
        self.attempts_failed = Counter(
            "milepost_attempts_failed",
            "Attempts failed by timeout (spec.timeout or the "
            "engine's default_timeout) or lost (their lease expired).",
            ["kind"],
            registry=r,
        )
        for kind in ATTEMPT_KINDS:  # both show, at 0 until it happens
            self.attempts_failed.labels(kind)
        self.evaluation_seconds = Histogram(
            "milepost_orchestrator_evaluation_seconds",
            "One orchestrator process() call: fold, decide and the transaction that stores both.",
            registry=r,
        )
        self.engine_errors = Counter(
            "milepost_engine_errors",
            "Runs failed because the orchestrator raised while deciding (error kind "
            "`engine`; the log has the traceback), their teardown steps run first.",
            registry=r,
        )
        self.queue_depth = Gauge(
            "milepost_command_queue_depth",
            "Commands queued and not yet claimed (read from the store at scrape time).",
            registry=r,
        )

        self.approval_decisions = Counter(
            "milepost_approval_decisions",
            "Approvals closed, by outcome (granted, denied, expired, invalidated).",
            ["outcome"],
            registry=r,
        )
        self.approval_time_to_decision = Histogram(
            "milepost_approval_time_to_decision_seconds",
            "Seconds from an approval's request "
            "to its outcome (granted, denied, expired or invalidated).",
            buckets=APPROVAL_BUCKETS,
            registry=r,
        )
        for outcome in APPROVAL_OUTCOMES.values():  # every outcome shows, at 0 until it happens
            self.approval_decisions.labels(outcome)
        self.usage_tokens = Counter(
            "milepost_usage_tokens",
            "Tokens (input + output) the tools reported using, by "
            "playbook, provider and model (DSL 10.6).",
            USAGE_LABELS,
            registry=r,
        )
        self.usage_cost = Counter(
            "milepost_usage_cost",
            "Cost the tools reported, in their currency, by playbook, "
            "provider and model (DSL 10.6).",
            USAGE_LABELS,
            registry=r,
        )

    def watch_queue(self, depth: Callable[[], int]) -> None:
        """Compute the queue depth from the store whenever the metrics are scraped."""
        self.queue_depth.set_function(lambda: float(depth()))

    def watch_approvals(self, pending: Callable[[], dict[str, int]]) -> None:
        """`milepost_approvals_pending{risk}` from the store whenever the metrics are scraped."""
        self.registry.register(PendingApprovals(pending))

    def watch_missing_workers(self, counts: Callable[[], dict[str, int]]) -> None:
        """`milepost_commands_without_worker{pool}` at each scrape (`engine.worker_pools`)."""
        self.registry.register(CommandsWithoutWorker(counts))

    def watch_workers(self, counts: Callable[[], dict[tuple[str, str], int]]) -> None:
        """`milepost_workers{pool,status}` at each scrape (`engine.workers`)."""
        self.registry.register(Workers(counts))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


RISKS = ("low", "medium", "high")
"""Always reported (0 when none is pending), so a dashboard's series never vanish."""


class _ScrapedGauge(Collector):
    """A gauge read at each scrape: its family, described without reading it."""

    NAME: str
    HELP: str
    LABELS: tuple[str, ...]

    def family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.NAME, self.HELP, labels=list(self.LABELS))

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # without it the registry would collect (ask the store) as it registers the collector
        yield self.family()


class PendingApprovals(_ScrapedGauge):
    """The approvals waiting for a decision, by risk, asked of the store at each scrape."""

    NAME = "milepost_approvals_pending"
    HELP = "Approvals waiting for a decision, by risk (read from the store at scrape time)."
    LABELS = ("risk",)

    def __init__(self, pending: Callable[[], dict[str, int]]) -> None:
        self.pending = pending

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self.family()
        counts = {risk: 0 for risk in RISKS} | self.pending()
        for risk in sorted(counts):
            family.add_metric([risk], float(counts[risk]))
        yield family


class CommandsWithoutWorker(_ScrapedGauge):
    """Queued commands of pools with no live worker, by pool, asked of the engine at each
    scrape. A pool once reported stays, at 0 once served, so an alert on it resolves
    instead of its series vanishing; `default` always shows."""

    NAME = "milepost_commands_without_worker"
    HELP = (
        "Queued commands of a pool that no live worker serves, by pool (start "
        "`milepost worker --pool <pool>`; read at scrape time)."
    )
    LABELS = ("pool",)

    def __init__(self, counts: Callable[[], dict[str, int]]) -> None:
        self.counts = counts
        self.seen: set[str] = {"default"}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self.family()
        counts = self.counts()
        self.seen.update(counts)
        for pool in sorted(self.seen):
            family.add_metric([pool], float(counts.get(pool, 0)))
        yield family


class Workers(_ScrapedGauge):
    """The workers of the registry by pool and status, read at each scrape; `live` and
    `lost` of a pool once seen stay, at 0, so an alert on lost workers resolves."""

    NAME = "milepost_workers"
    HELP = (
        "Workers of the registry by pool and status (lost: not seen for their ttl; "
        "`milepost workers`; read at scrape time)."
    )
    LABELS = ("pool", "status")

    def __init__(self, counts: Callable[[], dict[tuple[str, str], int]]) -> None:
        self.counts = counts
        self.seen: set[str] = {"default"}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self.family()
        counts = self.counts()
        self.seen.update(pool for pool, _ in counts)
        for pool in sorted(self.seen):
            for status in ("live", "lost"):
                family.add_metric([pool, status], float(counts.get((pool, status), 0)))
        yield family


class EngineMeters(Meters):
    """The engine service's counts (`engine.meters`), into these metrics."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def issued(self, count: int) -> None:
        self.metrics.commands_issued.inc(count)

    def claimed(self, count: int) -> None:
        self.metrics.commands_claimed.inc(count)

    def claim_refused(self, code: str) -> None:
        self.metrics.claim_conflicts.labels(code).inc()

    def settled(self, outcome: str) -> None:
        self.metrics.commands_completed.labels(outcome).inc()

    def engine_errors(self, count: int) -> None:
        self.metrics.engine_errors.inc(count)

    def evaluated(self, seconds: float) -> None:
        self.metrics.evaluation_seconds.observe(seconds)

    def lease_expired(self) -> None:
        self.metrics.leases_expired.inc()

    def run_stalled(self) -> None:
        self.metrics.runs_stalled.inc()

    def attempt_failed(self, kind: str) -> None:
        self.metrics.attempts_failed.labels(kind).inc()

    def approval_closed(self, outcome: str, seconds: float | None) -> None:
        self.metrics.approval_decisions.labels(outcome).inc()
        if seconds is not None:
            self.metrics.approval_time_to_decision.observe(seconds)

    def used(self, playbook: str, provider: str, model: str, tokens: int, cost: float) -> None:
        self.metrics.usage_tokens.labels(playbook, provider, model).inc(tokens)
        self.metrics.usage_cost.labels(playbook, provider, model).inc(cost)
