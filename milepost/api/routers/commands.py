"""Commands: read, claim (by id or the next queued), heartbeat, release.

A claim answers the command with its render context built from the execution's state at
claim time and a lease `{epoch, expires_at}`; every report must carry that epoch.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated

from fastapi import APIRouter, Path, Response

from milepost import sanitize
from milepost.api import errors, schemas, views
from milepost.api.auth import WORK, ReadWorkAuth, WorkAuth
from milepost.api.deps import MetricsDep, RuntimeDep, ServicesDep, StoreDep
from milepost.api.errors import AUTH, BODY
from milepost.api.runtime import Runtime
from milepost.core import state as st
from milepost.errors import ClaimRefused
from milepost.playbook import model
from milepost.settings import Settings
from milepost.store import port

router = APIRouter(prefix="/api/commands", tags=["commands"])

CommandId = Annotated[str, Path(description="The command id = the event id of its command.issued.",
                                 json_schema_extra={"pattern": schemas.ID_PATTERN})]


def existing(store: port.Store, value: str) -> port.CommandRow:
    try:
        cid = schemas.parse_id(value)
    except ValueError as exc:
        raise errors.invalid([{"loc": ["path", "event_id"], "msg": str(exc)}]) from None
    row = store.get_command(cid)
    if row is None:
        raise errors.not_found("command_not_found", f"no command {cid}", command_id=str(cid))
    return row


def lease_s(settings: Settings, asked: float | None) -> float:
    return asked if asked is not None else settings.lease_seconds


def _out(runtime: Runtime, row: port.CommandRow, lease: port.Lease | None, *,
         refresh: bool = True) -> schemas.CommandOut:  # fmt: skip
    def view(state: st.ExecutionState, playbook: model.Playbook) -> schemas.CommandOut:
        return views.command_out(state, playbook, row, lease)

    return runtime.read(row.execution_id, view, refresh=refresh, knows=row.command_id)


def hand_out(runtime: Runtime, claimed: port.Claimed,
             fresh: Collection[int] = ()) -> list[schemas.CommandOut]:  # fmt: skip
    """The claimed commands as a worker gets them, each with the render context of the
    state it was issued from. `fresh`: executions this runtime has just appended to.
    The claim itself skipped executions with a cancel requested; a cancel that lands
    after it is seen by the worker's heartbeat, like any cancel of a running command."""
    return [_out(runtime, row, lease, refresh=row.execution_id not in fresh)
            for row, lease in claimed]  # fmt: skip


@router.post("/claim", response_model=schemas.ClaimNextOut,
             responses=errors.responses(*AUTH, *BODY))
def claim_next(body: schemas.ClaimNextIn, services: ServicesDep,
               _: WorkAuth) -> Response:  # fmt: skip
    """[milepost extension] Claim up to `limit` queued commands (the polling path)."""
    runtime, store = services.runtime, services.store
    now = runtime.clock()
    claimed = store.claim_next(body.worker_id, now, lease_s(services.settings, body.lease_seconds),
                               body.limit, body.pool, new_id=runtime.new_id)  # fmt: skip
    out = hand_out(runtime, claimed)
    runtime.claimed(claimed)
    return views.as_json(schemas.ClaimNextOut(commands=out))


@router.get("/{event_id}", responses=errors.responses(*AUTH, 404, 422))
def get_command(event_id: CommandId, store: StoreDep, runtime: RuntimeDep,
                principal: ReadWorkAuth) -> schemas.CommandOut:  # fmt: skip
    command = _out(runtime, existing(store, event_id), None)
    if principal.role in WORK:
        return command
    # the context holds the real workload (opened from its sealed entry, `engine.seal`):
    # who cannot claim the command sees it as the log shows it
    return command.model_copy(update={"context": sanitize.mask(command.context),
                                      "args": sanitize.mask(command.args)})  # fmt: skip


@router.post("/{event_id}/claim", responses=errors.responses(*AUTH, *BODY, 404, 409))
def claim(event_id: CommandId, body: schemas.ClaimIn, services: ServicesDep, metrics: MetricsDep,
          _: WorkAuth) -> schemas.CommandOut:  # fmt: skip
    runtime, store = services.runtime, services.store
    row = existing(store, event_id)
    try:  # the store refuses a cancelled execution's command (`execution_cancelled`) itself
        lease = store.claim(row.command_id, body.worker_id, runtime.clock(),
                            lease_s(services.settings, body.lease_seconds),
                            new_id=runtime.new_id)  # fmt: skip
    except ClaimRefused as exc:
        metrics.claim_conflicts.labels(str(exc.fields.get("reason") or exc.code)).inc()
        raise
    runtime.claimed([(row, lease)])
    return _out(runtime, row, lease)


@router.post("/{event_id}/heartbeat", responses=errors.responses(*AUTH, *BODY, 404, 409))
def heartbeat(event_id: CommandId, body: schemas.HeartbeatIn, services: ServicesDep,
              _: WorkAuth) -> schemas.HeartbeatOut:  # fmt: skip
    runtime, store = services.runtime, services.store
    row = existing(store, event_id)
    lease = store.heartbeat(row.command_id, body.worker_id, body.epoch, runtime.clock(),
                            lease_s(services.settings, body.lease_seconds))  # fmt: skip
    # the projection (one row), not the log: a heartbeat comes every lease/3 per command
    execution = store.get_execution(row.execution_id)
    cancelled = execution is not None and (execution.cancel_requested
                                           or execution.status == st.CANCELLED)  # fmt: skip
    return schemas.HeartbeatOut(lease=views.lease_out(lease), cancelled=cancelled)


@router.post("/{event_id}/release", responses=errors.responses(*AUTH, *BODY, 404, 409))
def release(event_id: CommandId, body: schemas.ReleaseIn, services: ServicesDep,
            _: WorkAuth) -> schemas.ReleaseOut:  # fmt: skip
    """[milepost extension] Give back a claimed command that was not started: it is queued
    again for another worker, same attempt and key."""
    runtime, store = services.runtime, services.store
    row = existing(store, event_id)
    released = store.release(row.command_id, body.worker_id, body.epoch, runtime.clock(),
                             new_id=runtime.new_id)  # fmt: skip
    # a worker gives back the commands of a cancelled run: settle them so the run can end
    if released and not runtime.settle_cancelled([row.execution_id]):
        runtime.publisher.notify([runtime.notice(row)])
    return schemas.ReleaseOut(released=bool(released))
