"""What every HTTP request passes before routing: a body within `MILEPOST_MAX_BODY_BYTES`
and no NUL in its path or query.

PostgreSQL refuses NUL in text (`path`, `status`, a credential's name...), so a NUL that
reached a query was a 500; one check of the raw request covers every route and parameter,
present and future (the bodies' strings are checked by the request models,
`checks.Checked`). The body is refused from its `Content-Length` before it is read, and
counted as it streams when it has none. Not FastAPI's `max_body_size`: it answers 413 in
plain text, replacing the JSON error body.

`NaN`, `Infinity` and `-Infinity` are no JSON, but Python's parser (FastAPI's) takes them;
a body that contains one of those words is parsed strictly once it is complete, and a
literal one is refused (422 naming where it is) before any route sees it.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from fastapi.dependencies.models import Dependant
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from milepost.api import checks, errors


class Refused(HTTPException):
    """Raised from `receive`: FastAPI lets an HTTPException through its body parsing, so
    the app's handler answers `error` (`errors._http_error`)."""

    def __init__(self, error: errors.ApiError) -> None:
        super().__init__(error.status, error.message)
        self.error = error


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
        await self.app(scope, _Body(receive, self.max_body_bytes).receive, send)

    def _refused(self, scope: Scope) -> errors.ApiError | None:
        length = _content_length(scope)
        if length is not None and length > self.max_body_bytes:
            return errors.too_large(self.max_body_bytes)
        loc = _nul_at(scope)
        if loc is not None:
            return errors.invalid([{"loc": loc, "msg": checks.NUL_MESSAGE}])
        return None


class _Body:
    """The request's `receive`, counting its bytes and watching for non-JSON constants."""

    def __init__(self, receive: Receive, limit: int) -> None:
        self._receive = receive
        self.limit = limit
        self.seen = 0
        self.chunks: list[bytes] = []  # the same objects starlette keeps: no copy
        self.suspect = False
        self.tail = b""  # a word split across two chunks

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] != "http.request":
            return message
        chunk: bytes = message.get("body", b"")
        self.seen += len(chunk)
        if self.seen > self.limit:
            raise Refused(errors.too_large(self.limit))
        self.chunks.append(chunk)
        window = self.tail + chunk[:8]
        self.suspect = self.suspect or any(word in window or word in chunk for word in _WORDS)
        self.tail = chunk[-8:]
        if self.suspect and not message.get("more_body", False):
            loc = _constant_at(b"".join(self.chunks))
            if loc is not None:
                raise Refused(errors.invalid([{"loc": loc, "msg": _CONSTANT_MESSAGE}]))
        return message


_WORDS = (b"NaN", b"Infinity")
_CONSTANT_MESSAGE = "NaN and Infinity are not JSON: numbers must be finite"


class _Constant:
    """Stands for `NaN`/`Infinity` in a strict parse, to find where it was."""


def _constant_at(body: bytes) -> list[Any] | None:
    """`["body", *path]` of the first literal NaN/Infinity in `body`, None when it has none
    (the words were inside strings) or is no JSON at all (FastAPI answers that)."""
    try:
        data = json.loads(body, parse_constant=lambda _word: _Constant())
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[Any, list[Any]]] = [(data, ["body"])]
    while stack:
        item, path = stack.pop()
        if isinstance(item, _Constant):
            return path
        if isinstance(item, dict):
            stack.extend((v, [*path, k]) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, [*path, i]) for i, v in reversed(list(enumerate(item))))
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


_KNOWN_QUERY: dict[int, frozenset[str]] = {}
"""Per route (by `id`): the query parameters it declares, itself or in its dependencies."""


async def known_query(request: HTTPConnection) -> None:
    """An app-wide dependency: 422 naming a query parameter no parameter of the route reads
    (a misspelt `?limt=5` is otherwise ignored without a word, and the caller gets 100),
    or one given more than once."""
    if not request.query_params:
        return
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    known = _KNOWN_QUERY.get(id(route))
    if known is None:
        known = _KNOWN_QUERY[id(route)] = frozenset(_query_names(dependant))
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise errors.invalid(
            [
                {
                    "loc": ["query", name],
                    "msg": "unknown query parameter; this "
                    f"route takes {', '.join(sorted(known)) or 'none'}",
                }
                for name in unknown
            ]
        )
    # no route takes a list in its query: `?path=a&path=b` would silently mean `b`
    repeated = sorted(
        k for k in set(request.query_params) if len(request.query_params.getlist(k)) > 1
    )
    if repeated:
        raise errors.invalid(
            [
                {
                    "loc": ["query", name],
                    "msg": "given more than once; this parameter takes one value",
                }
                for name in repeated
            ]
        )


def _query_names(dependant: Dependant) -> list[str]:
    names = [param.alias for param in dependant.query_params]
    for sub in dependant.dependencies:
        names += _query_names(sub)
    return names
