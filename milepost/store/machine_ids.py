"""Machine ids: the 10 bits of a snowflake that name who made it, leased one per live
process (`Store.lease_machine_id`)."""

from __future__ import annotations

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
    raise MachineIdsExhausted(f"all {len(MACHINE_IDS)} machine ids are leased by live "
                              "processes", leased=len(live))  # fmt: skip
