"""What every HTTP request passes before routing: a body within `MILEPOST_MAX_BODY_BYTES`
and no NUL in its path or query.

PostgreSQL refuses NUL in text (`path`, `status`, a credential's name...), so a NUL that
reached a query was a 500; one check of the raw request covers every route and parameter,
present and future (the bodies' strings are checked by the request models,
`schemas._Checked`). The body is refused from its `Content-Length` before it is read, and
counted as it streams when it has none. Not FastAPI's `max_body_size`: it answers 413 in
plain text, replacing the JSON error body.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from milepost.api import errors, schemas


class BodyTooLarge(HTTPException):
    """Raised from `receive` once a streamed body passes the limit; FastAPI lets an
    HTTPException through its body parsing, so the app's handler answers it (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over {limit} bytes")
        self.limit = limit


class Edge:
    """ASGI middleware: 413 `too_large` for a body over `max_body_bytes`, 422
    `validation_error` naming the path or query parameter that carries a NUL."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self._refused(scope)
        if refused is not None:
            await errors.as_response(refused)(scope, receive, send)
            return
        limit, seen = self.max_body_bytes, 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, limited, send)

    def _refused(self, scope: Scope) -> errors.ApiError | None:
        length = _content_length(scope)
        if length is not None and length > self.max_body_bytes:
            return errors.too_large(self.max_body_bytes)
        loc = _nul_at(scope)
        if loc is not None:
            return errors.invalid([{"loc": loc, "msg": schemas.NUL_MESSAGE}])
        return None


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def _nul_at(scope: Scope) -> list[str] | None:
    path: str = scope.get("path", "")
    if "\x00" in path:
        return ["path"]
    query: bytes = scope.get("query_string", b"")
    if b"%00" not in query and b"\x00" not in query:  # the common case costs one scan
        return None
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if "\x00" in name or "\x00" in value:
            return ["query", name.replace("\x00", "\\x00")]
    return None
