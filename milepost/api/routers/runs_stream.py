"""`GET /api/executions/stream`: the runs list's change stream, as server-sent events.

Each message is one execution row that changed: a new run (its `updated_at` is its
start), one whose step exited (its progress moved) or whose approval opened, took a vote
or closed (`projection.Changes.progressed`: the approvals page follows this stream too),
or one that ended, `id: <updated_at>:<execution_id>` (resumable by `after` or `Last-Event-ID`),
`event: execution`, `data:` the row as the list shows it (with its progress). Without a cursor the stream starts `SLACK` seconds back (the list the client
just read may miss those). The rows are found by looks at the store once a second
(`stream.RECHECK`: no engine call wakes it) along the `execution_updated` index; a row
committed late with an `updated_at` behind rows already sent (another server's clock, a
slow transaction) is still sent by the look back over the last `SLACK` seconds. It never
ends by itself: it stops when the client goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from milepost.api import errors, list_page, schemas
from milepost.api.auth import ReadAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH
from milepost.api.routers import stream
from milepost.engine.lifecycle import ExecutionRow, Lifecycle

router = APIRouter(prefix="/api/executions", tags=["executions"])

SLACK = 5.0
"""Seconds looked back at every look: a change committed that late is still sent."""
_SSE: dict[int | str, dict[str, Any]] = {
    200: {**stream._SSE[200], "description": "The executions that change, as SSE."}
}


def _start(after: str | None, last_event_id: str | None, now: float) -> list_page.Keyset:
    """`after` wins over the header, as the run's stream does; neither: `SLACK` back."""
    if after is not None:
        found = list_page.parse_cursor(after, ("query", "after"), "an id of this stream")
    else:
        found = list_page.parse_cursor(
            last_event_id, ("header", "last-event-id"), "an id of this stream"
        )
    return found if found is not None else (now - SLACK, 0)


@router.get(
    "/stream", response_class=StreamingResponse, responses={**_SSE, **errors.responses(*AUTH, 422)}
)
async def stream_executions(
    request: Request,
    engine: EngineDep,
    _: ReadAuth,
    after: Annotated[
        str | None,
        Query(
            max_length=60,
            pattern=list_page.CURSOR_PATTERN,
            description=("An id of this stream: only the changes after it."),
        ),
    ] = None,
    last_event_id: Annotated[str | None, Header(max_length=60)] = None,
) -> StreamingResponse:
    """New, progressing and ended executions as text/event-stream, as they are stored."""
    start = _start(after, last_event_id, engine.clock())
    return StreamingResponse(
        _follow(request, engine, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _look(
    engine: Lifecycle,
    floor: list_page.Keyset,
    cursor: list_page.Keyset,
    sent: dict[list_page.Keyset, None],
) -> list[tuple[list_page.Keyset, schemas.ExecutionItem]]:
    """The rows changed past `cursor`, and those within `SLACK` behind it not sent yet
    (never behind `floor`, where the client resumed: it has seen those), with their keys.

    One read along the index from `SLACK` behind the cursor finds both, less what was sent:
    the rows past the cursor are never in `sent`. Only a window holding a full page of rows
    already sent (a burst of changes) needs the next page, read from that page's last key."""
    start = max((cursor[0] - SLACK, 0), floor)
    rows: list[ExecutionRow] = []
    while True:
        page = engine.changed_executions(start, stream.PAGE)
        rows += [r for r in page if (r.updated_at, r.execution_id) not in sent]
        if len(page) < stream.PAGE or rows:
            break
        start = (page[-1].updated_at, page[-1].execution_id)
    keys = [(r.updated_at, r.execution_id) for r in rows]
    return list(zip(keys, list_page.items(engine, rows), strict=True))


async def _follow(
    request: Request, engine: Lifecycle, cursor: list_page.Keyset
) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    floor = cursor
    sent: dict[list_page.Keyset, None] = {}  # the keys sent within SLACK of the cursor
    quiet_since = loop.time()
    while not await request.is_disconnected():
        items = await run_in_threadpool(_look, engine, floor, cursor, sent)
        for key, item in items:
            yield stream.message(item.model_dump_json(), list_page.keyset(*key), "execution")
            sent[key] = None
            cursor = max(cursor, key)
        for key in [k for k in sent if k[0] < cursor[0] - SLACK]:
            del sent[key]
        if items:
            quiet_since = loop.time()
            if len(items) >= stream.PAGE:
                continue  # a backlog: the next page at once
        elif loop.time() - quiet_since >= stream.KEEPALIVE:
            quiet_since = loop.time()
            yield ": keepalive\n\n"
        await asyncio.sleep(stream.RECHECK)
