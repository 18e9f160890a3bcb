"""`WS /api/worker/channel` [milepost extension]: a worker's reports over one WebSocket.

Each message is a request of `POST /api/events/batch`, `{"id": n, "body": {events,
claim?}}`, and is answered in order by `{"id": n, "status": <HTTP status>, "body": <that
route's reply or error body>}`. Same checks, same transaction, same errors; only the
framing differs. Why: a worker reports once per step, and an HTTP request costs the
worker and the server more CPU than the step's own work (headers, routing, dependency
resolution, the client's connection pool), where a message on an open socket costs about
a tenth of it. The handshake carries the bearer token like any request; it is checked
again every `RECHECK_SECONDS` (the token cache's lifetime: a revoked token stops an HTTP
client and an open socket within the same time), not on every message.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from milepost import errors
from milepost.api import auth, schemas
from milepost.api.deps import Services, services_of
from milepost.api.errors import ApiError, internal, invalid, milepost_reply, too_large
from milepost.api.routers import events

router = APIRouter(tags=["events"])

PATH = "/api/worker/channel"
RECHECK_SECONDS = auth.TOKEN_CACHE_TTL
"""How long one check of the socket's token holds."""


@router.websocket(PATH)
async def channel(websocket: WebSocket) -> None:
    try:
        principal = await _authorize(websocket)
    except ApiError as exc:
        # refused before the socket opens: the client sees the handshake fail (HTTP 403)
        await websocket.close(code=1008, reason=f"{exc.code}: {exc.message}"[:120])
        return
    await websocket.accept()
    services = services_of(websocket)
    loop = asyncio.get_running_loop()
    checked = loop.time()
    try:
        while True:
            text = await websocket.receive_text()
            if loop.time() - checked >= RECHECK_SECONDS:
                try:
                    principal = await _authorize(websocket)
                except ApiError as exc:
                    await websocket.send_text(_reply(_id_of(text), exc.status, exc.body()))
                    await websocket.close(code=1008, reason=exc.code)
                    return
                checked = loop.time()
            # the default executor, not starlette's thread pool: a plain hand-off costs less
            # per message than anyio's, and a worker's messages come one at a time
            await websocket.send_text(
                await loop.run_in_executor(None, answer, services, text, principal)
            )
    except WebSocketDisconnect:
        return


async def _authorize(websocket: WebSocket) -> auth.Principal:
    return auth.authorize(await auth.authenticate(websocket), auth.WORK, "report events")


def answer(services: Services, text: str, principal: auth.Principal) -> str:
    """The reply to one message (never raises: every failure is a reply); `principal`: the
    socket's, whose role decides which event types it may send (`auth.EVENT_ROLES`)."""
    limit = services.settings.max_body_bytes
    # a reply the worker can act on (uvicorn closes the socket only past `ws_max_size`,
    # twice this under `milepost server`); a character is at most 4 bytes
    if len(text) > limit or (len(text) * 4 > limit and len(text.encode()) > limit):
        return _reply(_leading_id(text), 413, too_large(limit).body())
    try:
        raw = json.loads(text)
    except ValueError as exc:
        return _reply(None, 422, invalid([{"loc": ["message"], "msg": f"not JSON: {exc}"}]).body())
    msg_id = raw.get("id") if isinstance(raw, dict) else None
    try:
        if not isinstance(raw, dict) or not isinstance(raw.get("body"), dict):
            raise invalid([{"loc": ["message"], "msg": 'a message is {"id": n, "body": {...}}'}])
        try:
            body = schemas.EventBatchIn.model_validate(raw["body"])
        except ValidationError as exc:
            raise invalid(
                [{"loc": ["body", *e["loc"]], "msg": e["msg"]} for e in exc.errors()]
            ) from None
        out = events.report(body, services, principal)
        # pydantic writes the body's JSON itself, as the batch route has it do
        return _framed(msg_id, 200, out.model_dump_json(exclude_none=True))
    except ApiError as exc:
        return _reply(msg_id, exc.status, exc.body())
    except errors.MilepostError as exc:
        status, err = milepost_reply(exc)
        return _reply(msg_id, status, err)
    except Exception as exc:  # the socket must outlive one bad batch
        return _reply(msg_id, 500, internal(exc, "a worker channel message"))


_LEADING_ID = re.compile(r'\{\s*"id"\s*:\s*(-?\d{1,20}|null|"[^"\\]{0,100}")')


def _leading_id(text: str) -> Any:
    """The id of a message too large to parse, when it comes first (as the worker writes
    it): the worker matches the reply by id and splits the batch on a 4xx."""
    found = _LEADING_ID.match(text)
    return json.loads(found.group(1)) if found else None


def _id_of(text: str) -> Any:
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    return raw.get("id") if isinstance(raw, dict) else None


def _reply(msg_id: Any, status: int, body: dict[str, Any]) -> str:
    return _framed(msg_id, status, json.dumps(body))


def _framed(msg_id: Any, status: int, body_json: str) -> str:
    return f'{{"id": {json.dumps(msg_id)}, "status": {status}, "body": {body_json}}}'
