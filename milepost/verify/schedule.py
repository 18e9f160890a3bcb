"""What the suite does and when, drawn from `--seed` alone (pure: the same seed, the same
schedule, so a failure can be replayed): the workload of each run and the faults.

A fault is a SIGKILL (the process is started again after `hold` seconds), a
SIGSTOP/SIGCONT pause of `hold` seconds (some longer than the lease: the claims of a
paused worker lapse and are re-issued while it sleeps) of the server or of a worker, or a
zombie: a worker that reports a command after giving its claim back, which the fence
must refuse.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

KILL = "kill"
PAUSE = "pause"
ZOMBIE = "zombie"
SERVER = "server"

MEAN_GAP = 2.5
"""Seconds between two faults, on average."""


@dataclass(frozen=True, slots=True)
class Fault:
    at: float
    """Seconds after the suite started."""
    what: str
    """KILL, PAUSE or ZOMBIE."""
    target: str
    """SERVER or `worker-<n>` (a zombie's is SERVER: it talks to it)."""
    hold: float = 0.0
    """How long the process stays paused, or dead before it is started again."""


@dataclass(frozen=True, slots=True)
class Order:
    """One run of the order playbook: its workload and what it must end as."""

    at: float
    fail: bool
    """The last step fails: the run ends FAILED, its charge refunded."""
    amount: int
    """Over 50: the `big` branch (a child playbook), else `small`."""
    items: list[int]

    @property
    def expected(self) -> str:
        return "FAILED" if self.fail else "COMPLETED"

    def workload(self, effects: str) -> dict[str, Any]:
        return {"effects": effects, "fail": self.fail, "amount": self.amount, "items": self.items}


@dataclass(frozen=True, slots=True)
class Schedule:
    seed: int
    orders: list[Order]
    faults: list[Fault]


def draw(seed: int, *, runs: int, duration: float, workers: int, lease: float) -> Schedule:
    """Runs start over the first half of `duration`, faults over all of it; there is at
    least one zombie and, with two faults or more, one pause longer than `lease`."""
    rng = random.Random(seed)
    orders = [
        Order(
            at=round(duration / 2 * i / max(runs, 1), 3),
            fail=rng.random() < 0.3,
            amount=rng.choice((10, 100)),
            items=list(range(1, rng.randint(1, 4) + 1)),
        )
        for i in range(runs)
    ]
    faults: list[Fault] = []
    at = rng.uniform(0.5, MEAN_GAP)
    while at < duration:
        faults.append(_fault(rng, at, workers, lease))
        at += rng.expovariate(1 / MEAN_GAP)
    if not any(f.what == ZOMBIE for f in faults):
        faults.append(Fault(round(rng.uniform(0.2, 0.5) * duration, 3), ZOMBIE, SERVER))
    if len(faults) >= 2 and not any(f.what == PAUSE and f.hold > lease for f in faults):
        faults.append(
            Fault(
                round(rng.uniform(0.1, 0.6) * duration, 3),
                PAUSE,
                f"worker-{rng.randint(1, workers)}",
                round(lease * rng.uniform(1.3, 2.0), 3),
            )
        )
    return Schedule(seed, orders, sorted(faults, key=lambda f: f.at))


def _fault(rng: random.Random, at: float, workers: int, lease: float) -> Fault:
    roll = rng.random()
    worker = f"worker-{rng.randint(1, workers)}"
    at = round(at, 3)
    if roll < 0.30:
        return Fault(at, KILL, worker, round(rng.uniform(0.0, 1.0), 3))
    if roll < 0.60:
        return Fault(at, PAUSE, worker, round(rng.uniform(0.2, 2.0) * lease, 3))
    if roll < 0.75:
        return Fault(at, KILL, SERVER, round(rng.uniform(0.0, 0.5), 3))
    if roll < 0.85:
        return Fault(at, PAUSE, SERVER, round(rng.uniform(0.2, 1.5) * lease, 3))
    return Fault(at, ZOMBIE, SERVER)
