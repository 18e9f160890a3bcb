"""Commands: read, claim (by id or the next queued), heartbeat, release.

A claim answers the command with its render context built from the execution's state at
claim time and a lease `{epoch, expires_at}`; every report must carry that epoch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Annotated

from fastapi import APIRouter, Path, Response

from milepost import ids, sanitize
from milepost.api import checks, errors, schemas, views
from milepost.api.auth import WORK, ReadWorkAuth, WorkAuth
from milepost.api.deps import EngineDep, ServicesDep
from milepost.api.errors import AUTH, BODY
from milepost.core import state as st
from milepost.engine.lifecycle import Claimed, CommandRow, Lease, Lifecycle
from milepost.playbook import model
from milepost.settings import Settings

router = APIRouter(prefix="/api/commands", tags=["commands"])

CommandId = Annotated[
    str,
    Path(
        description="The command id = the event id of its command.issued.",
        json_schema_extra={"pattern": checks.ID_PATTERN},
    ),
]


def command_id(value: str) -> int:
    try:
        return ids.parse_id(value)
    except ValueError as exc:
        raise errors.invalid([{"loc": ["path", "event_id"], "msg": str(exc)}]) from None


def lease_s(settings: Settings, asked: float | None) -> float:
    return asked if asked is not None else settings.lease_seconds


def _out(engine: Lifecycle, row: CommandRow, lease: Lease | None) -> schemas.CommandOut:
    return _outs(engine, row.execution_id, [(row, lease)], refresh=True)[0]


def _outs(
    engine: Lifecycle,
    execution_id: int,
    rows: Sequence[tuple[CommandRow, Lease | None]],
    *,
    refresh: bool,
) -> list[schemas.CommandOut]:
    def view(state: st.ExecutionState, playbook: model.Playbook) -> list[schemas.CommandOut]:
        return [views.command_out(state, playbook, row, lease) for row, lease in rows]

    return engine.read(
        execution_id, view, refresh=refresh, knows=[row.command_id for row, _ in rows]
    )


def hand_out(
    engine: Lifecycle, claimed: Claimed, fresh: Collection[int] = ()
) -> list[schemas.CommandOut]:
    """The claimed commands as a worker gets them, each with the render context of the
    state it was issued from. `fresh`: executions the engine has just appended to.
    The claim itself skipped executions with a cancel requested; a cancel that lands
    after it is seen by the worker's heartbeat, like any cancel of a running command.

    Each execution's commands are rendered under one take of its lock: taken once a
    command, a busy run's reports (which hold it for a whole transaction) got in between
    and the worker's answer waited behind each of them in turn."""
    by_run: dict[int, list[tuple[CommandRow, Lease | None]]] = {}
    for row, lease in claimed:
        by_run.setdefault(row.execution_id, []).append((row, lease))
    rendered = {
        xid: iter(_outs(engine, xid, rows, refresh=xid not in fresh))
        for xid, rows in by_run.items()
    }
    return [next(rendered[row.execution_id]) for row, _ in claimed]  # in the claim's order


@router.post(
    "/claim", response_model=schemas.ClaimNextOut, responses=errors.responses(*AUTH, *BODY)
)
def claim_next(body: schemas.ClaimNextIn, services: ServicesDep, _: WorkAuth) -> Response:
    """[milepost extension] Claim up to `limit` queued commands (the polling path)."""
    engine = services.engine
    claimed = engine.claim_next(
        body.worker_id, lease_s(services.settings, body.lease_seconds), body.limit, body.pool
    )
    return views.as_json(schemas.ClaimNextOut(commands=hand_out(engine, claimed)))


@router.get("/{event_id}", responses=errors.responses(*AUTH, 404, 422))
def get_command(
    event_id: CommandId, engine: EngineDep, principal: ReadWorkAuth
) -> schemas.CommandOut:
    command = _out(engine, engine.command(command_id(event_id)), None)
    if principal.role in WORK:
        return command
    # the context holds the real workload (opened from its sealed entry, `engine.seal`):
    # who cannot claim the command sees it as the log shows it
    return command.model_copy(
        update={"context": sanitize.mask(command.context), "args": sanitize.mask(command.args)}
    )


@router.post("/{event_id}/claim", responses=errors.responses(*AUTH, *BODY, 404, 409))
def claim(
    event_id: CommandId, body: schemas.ClaimIn, services: ServicesDep, _: WorkAuth
) -> schemas.CommandOut:
    # the engine refuses a cancelled execution's command (`execution_cancelled`) itself
    engine = services.engine
    row, lease = engine.claim(
        command_id(event_id), body.worker_id, lease_s(services.settings, body.lease_seconds)
    )
    return _out(engine, row, lease)


@router.post("/{event_id}/heartbeat", responses=errors.responses(*AUTH, *BODY, 404, 409))
def heartbeat(
    event_id: CommandId, body: schemas.HeartbeatIn, services: ServicesDep, _: WorkAuth
) -> schemas.HeartbeatOut:
    lease, cancelled = services.engine.heartbeat(
        command_id(event_id),
        body.worker_id,
        body.epoch,
        lease_s(services.settings, body.lease_seconds),
    )
    return schemas.HeartbeatOut(lease=views.lease_out(lease), cancelled=cancelled)


@router.post("/{event_id}/release", responses=errors.responses(*AUTH, *BODY, 404, 409))
def release(
    event_id: CommandId, body: schemas.ReleaseIn, engine: EngineDep, _: WorkAuth
) -> schemas.ReleaseOut:
    """[milepost extension] Give back a claimed command that was not started: it is queued
    again for another worker, same attempt and key."""
    released = engine.release(command_id(event_id), body.worker_id, body.epoch)
    return schemas.ReleaseOut(released=released)
