"""Machine ids: the 10 bits of a snowflake that name who made it, leased one per live
process (`Store.lease_machine_id`)."""

from __future__ import annotations

from typing import Protocol

from milepost.errors import MilepostError


class MachineIdsExhausted(MilepostError):
    """Every machine id (1..1023) is leased by a live process."""

    code = "machine_ids_exhausted"


MACHINE_IDS = range(1, 1024)
"""The machine ids leased to processes; 0, what every process minted on before leases,
is never leased."""


def free_machine_id(live: set[int]) -> int:
    """The lowest of MACHINE_IDS not in `live` (the ids leased and not expired)."""
    for machine_id in MACHINE_IDS:
        if machine_id not in live:
            return machine_id
    raise MachineIdsExhausted(
        f"all {len(MACHINE_IDS)} machine ids are leased by live processes", leased=len(live)
    )


class MachineIds(Protocol):
    """The machine-id part of the store port (`port.Store`): the 10 bits of a snowflake
    naming who made it, one per live process."""

    def lease_machine_id(self, holder: str, now: float, ttl: float) -> int:
        """The lowest id of MACHINE_IDS that is free or whose lease expired, leased to
        `holder` until `now + ttl`; MachineIdsExhausted when every one is live."""
        ...

    def renew_machine_id(self, machine_id: int, holder: str, now: float, ttl: float) -> bool:
        """Extend `holder`'s lease of `machine_id` (a lapsed one too, while nobody took it:
        then nobody else made ids with it); False when another holder has it now, and the
        caller must lease another id before it makes more."""
        ...

    def release_machine_id(self, machine_id: int, holder: str) -> bool:
        """Give the id back; False when `holder` did not hold it."""
        ...
