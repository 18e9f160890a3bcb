"""The workers: `POST /api/workers/machine-id` (a worker's check-in: the machine id it
mints its event ids with, and its row of the registry) and `GET /api/workers` (the
registry: who is live or lost, where, and what each runs).

A worker asks when it connects and again every third of its lease (at most every
`RENEW_EVERY_S`) with the id it holds: the lease is renewed, or, when it lapsed and another
process has that id now, a new one is leased and answered (the worker switches before it
makes more ids). Every process on the database leases from the same table, so no two live
ones share an id. The same call is the worker's heartbeat in the registry
(`engine.workers`): no second loop.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from milepost.api import errors, schemas, schemas_workers, views
from milepost.api.auth import ReadAuth, WorkAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH, BODY
from milepost.engine import worker_pools
from milepost.engine.machine import LEASE_TTL_S

router = APIRouter(prefix="/api/workers", tags=["workers"])


@router.get("", response_model=schemas_workers.WorkerList, responses=errors.responses(*AUTH, 422))
def list_workers(
    engine: EngineDep,
    _: ReadAuth,
    pool: Annotated[
        str | None,
        Query(pattern=schemas_workers.POOL_PATTERN, description="Only the workers of this pool."),
    ] = None,
    status: Annotated[
        schemas_workers.WorkerStatus | None,
        Query(description="`live`, or `lost`: not seen for its ttl."),
    ] = None,
) -> Response:
    """The workers registry by name: pools, host, pid, version, started, last seen, status
    and the commands each holds now; beside it, the pools with queued commands and no live
    worker."""
    found = engine.workers(pool=pool, status=status)
    missing = [m for m in engine.missing_workers() if pool is None or m.pool == pool]
    return views.as_json(
        schemas_workers.WorkerList(
            items=[schemas_workers.worker_out(w) for w in found],
            without_worker=[schemas_workers.NoLiveWorkerOut(**m.as_dict()) for m in missing],
        )
    )


@router.post(
    "/machine-id",
    response_model=schemas.MachineIdOut,
    responses=errors.responses(*AUTH, *BODY, 409, 503),
)
def machine_id(
    body: schemas.MachineIdIn, engine: EngineDep, principal: WorkAuth
) -> schemas.MachineIdOut:
    now = engine.clock()
    # the lease is the token's: only ids of its own leases does a server take from it
    worker = body.worker or schemas_workers.WorkerIn()
    who = worker.check_in(body.worker_id, body.pool, principal.token)
    # the holder names the worker's pool, for people reading `machine_lease`
    holder = worker_pools.holder(body.worker_id, body.pool)
    if body.release:
        engine.check_out(who, holder, body.machine_id)
        return schemas.MachineIdOut(machine_id=body.machine_id or 0, expires_at=now, renewed=False)
    leased, renewed = engine.check_in(who, holder, body.machine_id)
    return schemas.MachineIdOut(machine_id=leased, expires_at=now + LEASE_TTL_S, renewed=renewed)
