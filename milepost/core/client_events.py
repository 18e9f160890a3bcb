"""What a client posts (a worker's report, an operator's cancel, a NoETL worker's own
event), as the log keeps it. The API checks every field and masks the values first
(`api.ingest`); what the event then is, is decided here. Pure: ids and time come in.
"""

from __future__ import annotations

from typing import Any

from milepost.core import cancellation
from milepost.core import events as ev
from milepost.ids import as_id


def posted(
    event_id: int,
    execution_id: int,
    event_type: str,
    created_at: float,
    *,
    step: str | None,
    status: str | None,
    payload: dict[str, Any],
    meta: dict[str, Any],
    parent_event_id: int | None,
    worker_id: str | None,
    actor: str | None,
) -> ev.Event:
    """The event a client posted (`event_type` canonical, its fields checked): the
    engine's `ev.SETTLES` mark dropped (a client's report is fenced by its claim), a type
    the engine does not know marked informative (never folded), a report's command id and
    epoch as integers and its cause its command when it names none, and a cancel request
    naming the caller (`actor`) only, as on the cancel route: a client cannot name another
    actor, or a parent's cancel as the cause. `status` None: the type's default."""
    meta = {k: v for k, v in meta.items() if k != ev.SETTLES}
    if event_type not in ev.EVENT_TYPES:
        meta[ev.INFORMATIVE] = True  # the fold's mark (`core.events.informative`)
    if event_type in ev.REPORTS:
        # the fold and the projections read these as integers
        payload = dict(payload)
        payload["command_id"] = as_id(payload["command_id"])
        epoch: Any = meta.get("epoch", payload.get("epoch"))  # checked: an integer
        meta["epoch"] = int(epoch)
        if parent_event_id is None:  # a worker that names no cause: a report's is its command
            parent_event_id = payload["command_id"]
    if event_type == ev.EXECUTION_CANCEL_REQUESTED:
        payload = cancellation.request_payload(actor)
    return ev.new_event(
        event_id,
        execution_id,
        event_type,
        created_at,
        step=step,
        status=status,
        payload=payload,
        meta=meta,
        parent_event_id=parent_event_id,
        worker_id=worker_id,
    )
