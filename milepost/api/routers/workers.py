"""`POST /api/workers/machine-id`: the machine id a worker mints its event ids with.

A worker asks when it connects and again every `RENEW_EVERY_S` with the id it holds: the
lease is renewed, or, when it lapsed and another process has that id now, a new one is
leased and answered (the worker switches before it makes more ids). Every process on the
database leases from the same table, so no two live ones share an id.
"""

from __future__ import annotations

from fastapi import APIRouter

from milepost.api import errors, schemas
from milepost.api.auth import WorkAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH, BODY
from milepost.engine import worker_pools
from milepost.engine.machine import LEASE_TTL_S

router = APIRouter(prefix="/api/workers", tags=["workers"])


@router.post("/machine-id", response_model=schemas.MachineIdOut,
             responses=errors.responses(*AUTH, *BODY, 503))
def machine_id(body: schemas.MachineIdIn, engine: EngineDep,
               _: WorkAuth) -> schemas.MachineIdOut:  # fmt: skip
    now = engine.clock()
    # the holder names the worker's pool: a live lease is a live worker of that pool
    leased, renewed = engine.lease_machine_id(worker_pools.holder(body.worker_id, body.pool),
                                              body.machine_id, LEASE_TTL_S)  # fmt: skip
    return schemas.MachineIdOut(machine_id=leased, expires_at=now + LEASE_TTL_S,
                                renewed=renewed)  # fmt: skip
