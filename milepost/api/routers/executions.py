"""Executions: the list view, one execution with its events, its status, cancel."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from starlette.concurrency import run_in_threadpool

from milepost import ids
from milepost.api import checks, errors, list_page, schemas, views
from milepost.api.auth import ReadAuth
from milepost.api.child_access import ChildCancelAuth, ChildStatusAuth
from milepost.api.deps import EngineDep
from milepost.api.errors import AUTH
from milepost.core import state as st
from milepost.engine import summaries
from milepost.engine.lifecycle import ExecutionRow, Lifecycle
from milepost.playbook import model

router = APIRouter(prefix="/api/executions", tags=["executions"])

ExecutionId = Annotated[
    str,
    Path(description="Execution id (digits).", json_schema_extra={"pattern": checks.ID_PATTERN}),
]


def parse_execution_id(value: str) -> int:
    try:
        return ids.parse_id(value)
    except ValueError as exc:
        raise errors.invalid([{"loc": ["path", "execution_id"], "msg": str(exc)}]) from None


def existing(engine: Lifecycle, value: str) -> ExecutionRow:
    return engine.execution(parse_execution_id(value))


@router.get("", responses=errors.responses(*AUTH, 422))
def list_executions(
    engine: EngineDep,
    _: ReadAuth,
    # an enum: a status no run can have is a 422 naming the choices, not an empty 200
    status: Annotated[schemas.ExecutionStatus | None, Query()] = None,
    path: Annotated[str | None, Query(max_length=500, pattern=checks.NO_NUL_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=checks.MAX_OFFSET)] = 0,
    since: Annotated[
        str | None,
        Query(
            max_length=40,
            description=("Only executions started at or after it: ISO-8601 or epoch seconds."),
        ),
    ] = None,
    cursor: Annotated[
        str | None,
        Query(
            max_length=60,
            pattern=list_page.CURSOR_PATTERN,
            description=(
                "The `next` of the previous page: the rows after it (a keyset page, as fast at "
                "the 1000th page as at the first)."
            ),
        ),
    ] = None,
) -> schemas.ExecutionList:
    rows = engine.executions(
        status=status,
        path=path,
        limit=limit,
        offset=offset,
        since=_since(since),
        before=list_page.parse_cursor(cursor),
    )
    return schemas.ExecutionList(
        items=list_page.items(engine, rows),
        limit=limit,
        offset=offset,
        next=list_page.next_cursor(rows, limit),
    )


def _since(value: str | None) -> float | None:
    try:
        return None if value is None else checks.parse_time(value)
    except ValueError as exc:
        raise errors.invalid([{"loc": ["query", "since"], "msg": str(exc)}]) from None


def _summary(state: st.ExecutionState, _pb: model.Playbook) -> dict[str, Any]:
    return {**summaries.execution_summary(state), "last_seq": state.last_seq}


def _summary_now(engine: Lifecycle, execution_id: int) -> dict[str, Any]:
    """The summary, with the pools it waits on that have no live worker (DSL 10.6). The
    pools are read first: a command queued then was issued with events the state read
    after it holds, so every step said to wait is one of the summary's (the other way
    round, a report committed in between named a step the summary did not have yet). A
    run seen ended waits on no pool: its commands are not read (a status long-poll answers
    once the run ends)."""
    if engine.seen_ended(execution_id):
        return engine.read(execution_id, _summary)
    missing = engine.missing_workers(execution_id)
    summary = engine.read(
        execution_id, lambda state, pb: {**_summary(state, pb), "waits": engine.waits_of(state, pb)}
    )
    if summary["status"] in st.TERMINAL:
        return summary
    return summaries.with_missing_workers(summary, missing)


@router.get("/{execution_id}", responses=errors.responses(*AUTH, 404, 422))
def get_execution(
    execution_id: ExecutionId,
    engine: EngineDep,
    _: ReadAuth,
    events_limit: Annotated[int, Query(ge=0, le=10_000)] = 100,
    events_after: Annotated[
        int, Query(ge=0, le=checks.MAX_OFFSET, description="Return events with seq > this.")
    ] = 0,
) -> schemas.ExecutionOut:
    row = existing(engine, execution_id)
    summary = _summary_now(engine, row.execution_id)
    page = engine.events(row.execution_id, after_seq=events_after, limit=events_limit + 1)
    more = len(page) > events_limit
    page = page[:events_limit]
    return schemas.ExecutionOut(
        **views.execution_item(row).model_dump(),
        **_progress(summary),
        events=[views.event_out(e) for e in page],
        events_next=page[-1].seq if more and page else None,
        last_seq=summary["last_seq"],
    )


MAX_STATUS_WAIT = 60.0
"""Longest `wait` of the status route, in seconds (the client asks for at most 30)."""
STATUS_RECHECK = 0.2
"""While a status long-poll waits, how often it looks at the store: this server's engine
wakes it at once when it ends the run, but another server or the CLI may end it too."""


def _status_out(engine: Lifecycle, execution_id: int) -> schemas.StatusOut:
    summary = _summary_now(engine, execution_id)
    return schemas.StatusOut(
        execution_id=str(execution_id), status=summary["status"], **_progress(summary)
    )


def _progress(summary: dict[str, Any]) -> dict[str, Any]:
    """What the execution and status replies both show of a run's summary (`RunProgress`):
    the usage is the fold's, the same sums the store's `execution_usage` keeps."""
    return {
        "error": summary["error"],
        "steps": summary["steps"],
        "compensating": summary["compensating"],
        "compensation": summary.get("compensation"),
        "tearing_down": summary.get("tearing_down", False),
        "teardown": summary.get("teardown"),
        "no_live_worker": summary.get("no_live_worker", []),
        "usage": summary.get("usage"),
        "waits": summary.get("waits", []),
    }


@router.get(
    "/{execution_id}/status",
    response_model=schemas.StatusOut,
    responses=errors.responses(*AUTH, 404, 422),
)
async def get_status(
    execution_id: ExecutionId,
    engine: EngineDep,
    _: ChildStatusAuth,
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_STATUS_WAIT,
            description=(
                "Seconds to hold the reply until the execution is terminal (COMPLETED, FAILED, "
                "CANCELLED); after that the current status. 0: answer at once."
            ),
        ),
    ] = 0,
) -> Response:
    """The status, at once or long-polled with `wait`.

    Async so a waiting request holds no thread: the engine is synchronous, so every read
    goes through the thread pool, and the wait itself is an `asyncio.Event` that the
    engine sets when it finishes the run (`Lifecycle.watch`), with a look at the store every
    `STATUS_RECHECK` seconds for runs ended elsewhere.
    """
    xid = parse_execution_id(execution_id)
    if engine.orchestrator.cached(xid) is None:  # this server knows it: no need to ask
        await run_in_threadpool(existing, engine, execution_id)
    return views.as_json(await _status(engine, xid, wait))


async def _status(engine: Lifecycle, xid: int, wait: float) -> schemas.StatusOut:
    if wait <= 0:
        return await run_in_threadpool(_status_out, engine, xid)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    ended = asyncio.Event()
    engine.watch(xid, loop, ended)  # before the first read: an end in between still wakes us
    try:
        out = await run_in_threadpool(_status_out, engine, xid)
        while out.status not in st.TERMINAL:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return out
            try:
                await asyncio.wait_for(ended.wait(), min(STATUS_RECHECK, remaining))
                ended.clear()  # set once per end; from now on only the store re-checks count
            except TimeoutError:
                if not await run_in_threadpool(engine.ended, xid) and loop.time() < deadline:
                    continue
            out = await run_in_threadpool(_status_out, engine, xid)
        return out
    finally:
        engine.unwatch(xid, ended)


@router.post("/{execution_id}/cancel", responses=errors.responses(*AUTH, 404, 409, 422))
def cancel(
    execution_id: ExecutionId, engine: EngineDep, principal: ChildCancelAuth
) -> schemas.CancelOut:
    row = existing(engine, execution_id)
    state = engine.cancel(row.execution_id, principal.starter)  # AlreadyTerminal: 409
    return schemas.CancelOut(execution_id=str(row.execution_id), status=state.status)
