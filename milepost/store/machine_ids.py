"""Machine ids: the 10 bits of a snowflake that name who made it, leased one per live
process (`Store.lease_machine_id`).

A lease names its holder (the process) and its owner: the token a worker leased it with
through its server, None for a process on the database itself (a server, `milepost run`,
a CLI command). The server takes a client's event id only on the poster's own machine id,
or from before the id's lease began (`engine.machine.IdSpaces`): so the ids a lease stays
its holder's after it lapsed or was given back, for `RETAKE_AFTER_S`, before another
process may take it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from milepost.errors import MilepostError


class MachineIdsExhausted(MilepostError):
    """Every machine id (1..1023) is leased by a live process."""

    code = "machine_ids_exhausted"


MACHINE_IDS = range(1, 1024)
"""The machine ids handed out by `lease_machine_id` without a `want`; 0, what every process
minted on before leases, is never handed out."""

RETAKE_AFTER_S = 60.0
"""Seconds after a lease lapsed (or was given back) before another process may take its
id: ids its holder minted up to then (at most `FUTURE_ID_SKEW_S` ahead of the server's
clock, `api.ingest`) are all in the past for the next holder, whose first id is later."""


@dataclass(frozen=True, slots=True)
class MachineLease:
    """A row of `machine_lease`."""

    machine_id: int
    holder: str
    """The process (unique per process)."""
    owner: str | None
    """The token a worker leased it with (its hash); None: a process on the database."""
    leased_at: float | None
    """When its holder took it (None: before migration 16, unknown)."""
    expires_at: float


def pick_machine_id(
    leases: Iterable[MachineLease],
    holder: str,
    owner: str | None,
    now: float,
    want: int | None = None,
) -> int:
    """The id `holder` leases: `want` when it is free for it, else the lowest lapsed id of
    the same owner (its own ids: a restarted server takes its id back), else the lowest id
    of MACHINE_IDS nobody held yet, else the one whose lease lapsed longest ago,
    `RETAKE_AFTER_S` at least. Free for `holder`: no row, its own row, a lapsed row of the
    same owner, or one lapsed for `RETAKE_AFTER_S`."""
    rows = {lease.machine_id: lease for lease in leases}

    def own(row: MachineLease) -> bool:
        return row.holder == holder or (row.expires_at <= now and row.owner == owner)

    def free(machine_id: int) -> bool:
        row = rows.get(machine_id)
        return row is None or own(row) or row.expires_at + RETAKE_AFTER_S <= now

    if want is not None and free(want):
        return want
    for machine_id in MACHINE_IDS:
        row = rows.get(machine_id)
        if row is not None and own(row):
            return machine_id
    for machine_id in MACHINE_IDS:
        if machine_id not in rows:
            return machine_id
    lapsed = sorted((r.expires_at, m) for m, r in rows.items() if m in MACHINE_IDS and free(m))
    if lapsed:
        return lapsed[0][1]
    raise MachineIdsExhausted(
        f"all {len(MACHINE_IDS)} machine ids are leased by live processes (or lapsed less "
        f"than {RETAKE_AFTER_S:g} s ago)",
        leased=len(rows),
    )


class MachineIds(Protocol):
    """The machine-id part of the store port (`port.Store`): the 10 bits of a snowflake
    naming who made it, one per live process."""

    def lease_machine_id(
        self,
        holder: str,
        now: float,
        ttl: float,
        *,
        owner: str | None = None,
        want: int | None = None,
    ) -> int:
        """The id `pick_machine_id` gives, leased to `holder` (of `owner`) from `now` until
        `now + ttl`; MachineIdsExhausted when every one is taken."""
        ...

    def renew_machine_id(
        self, machine_id: int, holder: str, now: float, ttl: float, *, owner: str | None = None
    ) -> bool:
        """Extend `holder`'s lease of `machine_id` (a lapsed one too, while nobody took it:
        then nobody else made ids with it); False when another holder (or owner) has it now,
        and the caller must lease another id before it makes more."""
        ...

    def release_machine_id(
        self, machine_id: int, holder: str, now: float, *, owner: str | None = None
    ) -> bool:
        """Give the id back: its lease ends at `now` (the row stays, `RETAKE_AFTER_S`);
        False when `holder` (of `owner`) did not hold it live."""
        ...

    def machine_leases(self) -> list[MachineLease]:
        """Every row of `machine_lease`, live or not, by machine id."""
        ...
