"""Core values -> wire models (ids as strings, times as ISO-8601)."""

from __future__ import annotations

from typing import Any

from fastapi import Response
from pydantic import BaseModel

from milepost import wire
from milepost.api import checks, schemas
from milepost.core import events as ev
from milepost.core import state as st
from milepost.core.work import work_item
from milepost.playbook import model
from milepost.store import port


def as_json(model: BaseModel, *, exclude_none: bool = False) -> Response:
    """`model` as the JSON reply, serialized once. FastAPI would validate a returned model
    against the route's response model again before serializing it; the hot routes (a
    worker's report, a claim, a status poll) build theirs from typed values already. The
    route's annotation still documents the shape."""
    return Response(model.model_dump_json(exclude_none=exclude_none), media_type="application/json")


def sid(value: int | None) -> str | None:
    return None if value is None else str(value)


def event_out(event: ev.Event) -> schemas.EventOut:
    return schemas.EventOut(
        event_id=str(event.event_id),
        execution_id=str(event.execution_id),
        seq=event.seq,
        event_type=event.event_type,
        step=event.step,
        status=event.status,
        result=event.envelope_result(),
        meta=event.meta,
        worker_id=event.worker_id,
        parent_event_id=sid(event.parent_event_id),
        created_at=checks.iso(event.created_at),
    )


def execution_item(row: port.ExecutionRow) -> schemas.ExecutionItem:
    ended = row.updated_at if row.status in st.TERMINAL else None
    return schemas.ExecutionItem(
        execution_id=str(row.execution_id),
        path=row.path,
        version=row.version,
        status=row.status,
        created_at=checks.iso(row.created_at),
        updated_at=checks.iso(row.updated_at),
        parent_execution_id=sid(row.parent_execution_id),
        ended_at=checks.iso(ended),
        duration_s=None if ended is None else round(ended - row.created_at, 3),
        started_by=row.started_by,
    )


def playbook_usage(row: port.UsageRow) -> schemas.PlaybookUsage:
    return schemas.PlaybookUsage(
        path=row.path,
        provider=row.provider,
        model=row.model,
        input_tokens=row.input_tokens,
        output_tokens=row.output_tokens,
        tokens=row.tokens,
        cost=row.cost,
    )


def catalog_entry(entry: port.CatalogEntry) -> schemas.CatalogEntryOut:
    return schemas.CatalogEntryOut(
        path=entry.path,
        version=entry.version,
        catalog_id=f"{entry.path}@{entry.version}",
        created_at=checks.iso(entry.created_at),
    )


def command_out(
    state: st.ExecutionState,
    playbook: model.Playbook,
    row: port.CommandRow,
    lease: port.Lease | None = None,
) -> schemas.CommandOut:
    """The command with its render context built from the state now (claim time)."""
    command = state.commands.get(row.command_id) or st.Command(
        command_id=row.command_id,
        step=row.step,
        run=row.run,
        index=row.index,
        attempt=row.attempt,
        idempotency_key=row.idempotency_key,
    )
    item = work_item(state, playbook, command, lease.epoch if lease else row.epoch)
    return schemas.CommandOut(
        command_id=str(row.command_id),
        event_id=str(row.command_id),
        execution_id=str(row.execution_id),
        step=row.step,
        run=row.run,
        index=row.index,
        attempt=row.attempt,
        idempotency_key=row.idempotency_key,
        status=port.COMMAND_CLAIMED if lease else row.status,
        playbook=schemas.PlaybookRef(path=state.path, version=state.version),
        context=wire.plain(item.context),
        loop_steps=wire.loop_steps(state, playbook, item.context),
        args=wire.plain(item.args),
        lease=lease_out(lease) if lease else None,
        approved_digest=item.approved_digest,
        approval_expires_at=checks.iso(item.approval_expires_at),
        traceparent=item.traceparent,
    )


def lease_out(lease: port.Lease) -> schemas.LeaseOut:
    return schemas.LeaseOut(
        epoch=lease.epoch, expires_at=checks.iso(lease.expires_at), lease_seconds=lease.lease_s
    )


def approval_item(row: port.ApprovalRow) -> schemas.ApprovalItem:
    return schemas.ApprovalItem(**_approval_fields(row))


def approval_out(row: port.ApprovalRow) -> schemas.ApprovalOut:
    request = row.request
    return schemas.ApprovalOut(
        **_approval_fields(row),
        kind=request.get("kind"),
        calls=list(request.get("calls", [])),
        policy=request.get("policy"),
        allow_self_approval=bool(request.get("allow_self_approval")),
        votes=[
            schemas.VoteOut(
                identity=v["identity"],
                decision=v["decision"],
                reason=v.get("reason"),
                at=checks.iso(v.get("at")),
            )
            for v in row.votes
        ],
        outcome=row.outcome,
    )


def _approval_fields(row: port.ApprovalRow) -> dict[str, Any]:
    return {
        "approval_id": str(row.approval_id),
        "execution_id": str(row.execution_id),
        "path": row.path,
        "step": row.step,
        "run": row.run,
        "status": row.status,
        "risk": row.risk,
        "approvers": row.approvers,
        "quorum": row.quorum,
        "approved": sum(v["decision"] == "approve" for v in row.votes),
        "expires_at": checks.iso(row.expires_at),
        "requested_at": checks.iso(row.requested_at),
        "decided_at": checks.iso(row.decided_at),
        "started_by": row.started_by,
        "digest": row.digest,
    }
