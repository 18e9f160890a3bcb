"""The invariants, as pure functions of what the suite collected: the event log of every
execution, the side effects table, the event ids the workers were told the log holds and
the orders the suite placed. Each returns the violations it found, as sentences."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from milepost.core import events as ev
from milepost.store.projection import ENDED_STATUS
from milepost.verify.effects import Effect

ORDER_PATH = "milepost/verify/order"
CHILD_PATH = "milepost/verify/child"


@dataclass(slots=True)
class Evidence:
    logs: dict[int, list[ev.Event]]
    """execution id -> its events in log order, for every execution of the database."""
    expected: dict[int, str]
    """Order execution id -> the status its workload implies."""
    effects: list[Effect]
    reported: set[int]
    """Event ids a worker (or the zombie) was told the log holds."""
    unstarted: int = 0
    """Orders the suite could not start before the deadline."""


@dataclass(slots=True)
class Verdict:
    name: str
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def terminal(x: Evidence) -> list[str]:
    """Every run ended within the deadline (children too), every order was started."""
    out = [
        f"execution {xid} did not end (last event {log[-1].event_type if log else 'none'})"
        for xid, log in sorted(x.logs.items())
        if _status(log) is None
    ]
    if x.unstarted:
        out.append(f"{x.unstarted} order(s) could not be started")
    return out


def statuses(x: Evidence) -> list[str]:
    """Each order ends as its workload implies; a child completes (or is cancelled with
    the attempt of its parent that was lost)."""
    out = []
    for xid, want in sorted(x.expected.items()):
        got = _status(x.logs.get(xid, []))
        if got is not None and got != want:
            out.append(f"execution {xid} ended {got}, its workload implies {want}")
    for xid, log in sorted(x.logs.items()):
        got = _status(log)
        if _path(log) == CHILD_PATH and got not in (None, "COMPLETED", "CANCELLED"):
            out.append(f"child execution {xid} ended {got}")
    return out


def one_terminal_event(x: Evidence) -> list[str]:
    """Exactly one terminal event per run, and nothing after it."""
    out = []
    for xid, log in sorted(x.logs.items()):
        ends = [i for i, e in enumerate(log) if e.event_type in ev.TERMINAL_EXECUTION_EVENTS]
        if len(ends) > 1:
            out.append(f"execution {xid} has {len(ends)} terminal events")
        elif ends and ends[0] != len(log) - 1:
            late = log[ends[0] + 1]
            out.append(f"execution {xid}: {late.event_type} ({late.event_id}) after its end")
    return out


def effects_once(x: Evidence) -> list[str]:
    """An attempt's side effect happened once (its idempotency key once in the table), and
    every charge the log took as done was made."""
    out = [
        f"idempotency key {key[:12]}... did its side effect {n} times"
        for key, n in sorted(Counter(e.idempotency_key for e in x.effects).items())
        if n > 1
    ]
    charged = {e.execution_id for e in x.effects if e.kind == "charge"}
    for xid, log in sorted(x.logs.items()):
        done = [
            e for e in _accepted(log) if e.event_type == ev.COMMAND_COMPLETED and e.step == "charge"
        ]
        if done and xid not in charged:
            out.append(
                f"execution {xid}: charge completed ({done[0].event_id}) without its side effect"
            )
    return out


def fenced(x: Evidence) -> list[str]:
    """Every report the log took (not marked stale) came from its command's live claim: the
    command's last `command.claimed` before it has the report's epoch, and that claim was
    neither released nor lost in between. The engine's own settlement (`meta.settles`)
    found its command open (queued or claimed) at its epoch: no claim was taken between
    its read and its append."""
    out = []
    for xid, log in sorted(x.logs.items()):
        live: dict[int, int | None] = {}  # command id -> epoch of its live claim
        last: dict[int, int] = {}  # command id -> epoch of its last claim
        closed: set[int] = set()  # settled or lost
        for event in log:
            cid = _command(event)
            if cid is None:
                continue
            if event.event_type == ev.COMMAND_CLAIMED:
                live[cid] = last[cid] = int(event.payload["epoch"])
            elif event.event_type in (
                ev.COMMAND_RELEASED,
                ev.COMMAND_LEASE_EXPIRED,
            ) and not event.meta.get("stale"):
                live[cid] = None
                if event.event_type == ev.COMMAND_LEASE_EXPIRED:
                    closed.add(cid)
            elif event.event_type in ev.SETTLING_REPORTS and not event.meta.get("stale"):
                epoch = event.meta.get("epoch")
                if event.meta.get(ev.SETTLES):
                    if cid in closed or epoch is None or int(epoch) != last.get(cid, 0):
                        held = "settled" if cid in closed else f"epoch {last.get(cid, 0)}"
                        out.append(
                            f"execution {xid}: the engine's {event.event_type} "
                            f"{event.event_id} of command {cid} with epoch {epoch} taken "
                            f"({held})"
                        )
                elif cid not in live:
                    out.append(
                        f"execution {xid}: {event.event_type} {event.event_id} of "
                        f"command {cid}, which was never claimed"
                    )
                elif live[cid] is None or epoch is None or int(epoch) != live[cid]:
                    held = "no live claim" if live[cid] is None else f"live epoch {live[cid]}"
                    out.append(
                        f"execution {xid}: {event.event_type} {event.event_id} of "
                        f"command {cid} with epoch {epoch} taken ({held})"
                    )
                live[cid] = None
                closed.add(cid)
    return out


def reported_in_log(x: Evidence) -> list[str]:
    """No event a worker was told the log holds is missing from it."""
    logged = {e.event_id for log in x.logs.values() for e in log}
    missing = sorted(x.reported - logged)
    return [
        f"event {event_id}, acknowledged to a worker, is not in the log"
        for event_id in missing[:20]
    ] + ([f"... and {len(missing) - 20} more"] if len(missing) > 20 else [])


def compensated_once(x: Evidence) -> list[str]:
    """A failed order refunds its charge exactly once (one compensation in the log, one
    refunded operation in the table); a completed one refunds nothing."""
    refunds: dict[int, set[str]] = {}
    for e in x.effects:
        if e.kind == "refund":
            refunds.setdefault(e.execution_id, set()).add(e.operation_key)
    out = []
    for xid, want in sorted(x.expected.items()):
        log = x.logs.get(xid, [])
        done = sum(1 for e in log if e.event_type == ev.COMPENSATION_COMPLETED)
        started = sum(1 for e in log if e.event_type == ev.COMPENSATION_STARTED)
        refunded = len(refunds.get(xid, ()))
        if want == "FAILED" and _status(log) == "FAILED" and (done, started, refunded) != (1, 1, 1):
            out.append(
                f"execution {xid}: {started} compensation(s) started, {done} completed, "
                f"{refunded} refund(s) made; want one of each"
            )
        elif want == "COMPLETED" and (done or started or refunded):
            out.append(f"execution {xid} completes but was compensated")
    return out


CHECKS: list[tuple[str, Callable[[Evidence], list[str]]]] = [
    ("every run terminal", terminal),
    ("statuses as the playbook implies", statuses),
    ("one terminal event per run", one_terminal_event),
    ("side effect once per idempotency key", effects_once),
    ("reports fenced by their claim's epoch", fenced),
    ("acknowledged events in the log", reported_in_log),
    ("compensations exactly once", compensated_once),
]


def check(x: Evidence) -> list[Verdict]:
    return [Verdict(name, fn(x)) for name, fn in CHECKS]


def figures(x: Evidence) -> dict[str, int]:
    """Counts of what the faults caused, from the log and the table."""
    every = [e for log in x.logs.values() for e in log]
    kinds = Counter(e.event_type for e in every)
    # flaky asks twice by design: the others only when a worker was lost mid-attempt
    asked = Counter(e.operation_key for e in x.effects if e.kind != "flaky")
    ended = Counter(_status(log) for xid, log in x.logs.items() if xid in x.expected)
    return {
        "order executions": len(x.expected),
        "completed": ended["COMPLETED"],
        "failed": ended["FAILED"],
        "child executions": sum(1 for log in x.logs.values() if _path(log) == CHILD_PATH),
        "events": len(every),
        "claims": kinds[ev.COMMAND_CLAIMED],
        "leases expired": kinds[ev.COMMAND_LEASE_EXPIRED],
        "retries scheduled": kinds[ev.COMMAND_RETRY_SCHEDULED],
        "stale reports (fenced)": sum(1 for e in every if e.meta.get("stale")),
        "side effects": len(x.effects),
        "charges or refunds asked again": sum(1 for n in asked.values() if n > 1),
        "acknowledged events": len(x.reported),
    }


def _status(log: Iterable[ev.Event]) -> str | None:
    for event in log:
        if (status := ENDED_STATUS.get(event.event_type)) is not None:
            return status
    return None


def _path(log: list[ev.Event]) -> str | None:
    first = log[0] if log else None
    if first is None or first.event_type != ev.EXECUTION_STARTED:
        return None
    return str(first.payload.get("path", ""))


def _accepted(log: Iterable[ev.Event]) -> list[ev.Event]:
    return [e for e in log if not e.meta.get("stale")]


def _command(event: ev.Event) -> int | None:
    value = event.payload.get("command_id") if isinstance(event.payload, Mapping) else None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
