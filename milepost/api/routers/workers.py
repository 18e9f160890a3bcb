"""`POST /api/workers/machine-id`: the machine id a worker mints its event ids with.

A worker asks when it connects and again every `RENEW_EVERY_S` with the id it holds: the
lease is renewed, or, when it lapsed and another process has that id now, a new one is
leased and answered (the worker switches before it makes more ids). Every process on the
database leases from the same table, so no two live ones share an id.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from milepost.api.auth import WorkAuth
from milepost.api.deps import RuntimeDep, StoreDep
from milepost.core.ids import MAX_MACHINE
from milepost.engine.machine import LEASE_TTL_S

router = APIRouter(prefix="/api/workers", tags=["workers"])


class MachineIdIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker_id: str = Field(min_length=1, max_length=200)
    machine_id: int | None = Field(default=None, ge=0, le=MAX_MACHINE,
                                   description="The id held now, to renew; left out to "
                                   "lease a new one.")  # fmt: skip


class MachineIdOut(BaseModel):
    machine_id: int
    expires_at: float
    """Seconds since the epoch; renew well before."""
    renewed: bool
    """False when `machine_id` is a new lease (the one asked for was lost, or none was)."""


@router.post("/machine-id", response_model=MachineIdOut)
def machine_id(body: MachineIdIn, store: StoreDep, runtime: RuntimeDep,
               _: WorkAuth) -> MachineIdOut:  # fmt: skip
    holder = f"worker:{body.worker_id}"
    now = runtime.clock()
    if body.machine_id is not None and store.renew_machine_id(body.machine_id, holder, now,
                                                              LEASE_TTL_S):  # fmt: skip
        return MachineIdOut(machine_id=body.machine_id, expires_at=now + LEASE_TTL_S,
                            renewed=True)  # fmt: skip
    leased = store.lease_machine_id(holder, now, LEASE_TTL_S)
    return MachineIdOut(machine_id=leased, expires_at=now + LEASE_TTL_S, renewed=False)
