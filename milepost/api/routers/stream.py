"""`GET /api/executions/{id}/stream`: a run's events as server-sent events, resumable.

Each event past `after` (or the `Last-Event-ID` header) is one message, `id: <seq>`,
`event: <type>`, `data: <the event as /events shows it>`; the backlog goes in pages, then
the stream waits for more and ends with `event: end` once the run is terminal and its
last event was sent. The engine wakes watchers only when it ends a run, so new events are
found by a look at the store at most once a second (`RECHECK`); a comment every
`KEEPALIVE` seconds keeps proxies from closing an idle stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from milepost.api import checks, errors, views
from milepost.api.auth import ReadAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH
from milepost.api.routers.executions import ExecutionId, parse_execution_id
from milepost.core import state as st
from milepost.engine import event_query
from milepost.engine.lifecycle import Lifecycle

router = APIRouter(prefix="/api/executions", tags=["executions"])

PAGE = 500
"""Events read per look at the store: a 200,000-event backlog is never held at once."""
RECHECK = 1.0
"""Seconds between looks at the store while the run is live (the brief's at most 1/s)."""
KEEPALIVE = 15.0
"""Seconds of silence after which a `: keepalive` comment is sent."""
_ALL = event_query.EventQuery(None, ())


def message(event_out_json: str, seq: int | str, event_type: str) -> str:
    return f"id: {seq}\nevent: {event_type}\ndata: {event_out_json}\n\n"


def _resume_from(after: int | None, last_event_id: str | None) -> int:
    """`after` wins over the header; a header that is no seq is a 422, not a restart."""
    if after is not None:
        return after
    if last_event_id is None or not last_event_id.strip():
        return 0
    try:
        value = int(last_event_id.strip())
        if value < 0:
            raise ValueError("a seq is not negative")
    except ValueError as exc:
        raise errors.invalid([{"loc": ["header", "last-event-id"], "msg": str(exc)}]) from None
    return value


_SSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The run's events as server-sent events.",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


@router.get(
    "/{execution_id}/stream",
    response_class=StreamingResponse,
    responses={**_SSE, **errors.responses(*AUTH, 404, 422)},
)
async def stream_events(
    execution_id: ExecutionId,
    request: Request,
    engine: EngineDep,
    _: ReadAuth,
    after: Annotated[
        int | None, Query(ge=0, le=checks.MAX_OFFSET, description="Only events with seq > this.")
    ] = None,
    last_event_id: Annotated[str | None, Header(max_length=40)] = None,
) -> StreamingResponse:
    """The run's events past `after` (or `Last-Event-ID`) as text/event-stream, then its
    new events as they are stored, then `event: end` when it is terminal."""
    xid = parse_execution_id(execution_id)
    start = _resume_from(after, last_event_id)
    # the first page before the reply starts: an unknown run is a JSON 404, not a stream
    first = await run_in_threadpool(event_query.page, engine, xid, _ALL, after=start, limit=PAGE)
    return StreamingResponse(
        _follow(request, engine, xid, first),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _follow(
    request: Request, engine: Lifecycle, xid: int, page: event_query.EventPage
) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    engine.watch(xid, loop, ended)
    try:
        quiet_since = loop.time()
        while True:
            for event in page.events:
                yield message(views.event_out(event).model_dump_json(), event.seq, event.event_type)
            if page.events:
                quiet_since = loop.time()
            if page.next_after is None and page.status in st.TERMINAL:
                # the status was read before the events: the whole log has been sent
                yield f"event: end\ndata: {json.dumps({'status': page.status})}\n\n"
                return
            if page.next_after is None:  # caught up: wait for the engine or the next look
                if await request.is_disconnected():
                    return
                try:
                    await asyncio.wait_for(ended.wait(), RECHECK)
                    ended.clear()
                except TimeoutError:
                    pass
                if await request.is_disconnected():
                    return
                if loop.time() - quiet_since >= KEEPALIVE:
                    quiet_since = loop.time()
                    yield ": keepalive\n\n"
            elif await request.is_disconnected():
                return
            page = await run_in_threadpool(
                event_query.page, engine, xid, _ALL, after=page.last_seq, limit=PAGE
            )
    finally:
        engine.unwatch(xid, ended)
