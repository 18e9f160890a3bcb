"""Bearer tokens and roles (docs/server-contract.md, Auth).

A token is 32 random bytes in url-safe base64; the store keeps only its SHA-256, so a
leaked database does not hand out access. Each route declares what it needs with one of
the `*Auth` aliases below; `GET /health` needs nothing.

Lookups are cached per app for `TOKEN_CACHE_TTL` seconds (`TokenCache`), so a request
costs no database round trip for a token seen recently.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from milepost.api.errors import ApiError
from milepost.core import events as ev
from milepost.records import record

ROLES = ("admin", "operator", "approver", "worker", "viewer")
TOKEN_PREFIX = "mp_"
NAME = re.compile(r"[A-Za-z0-9._@-]{1,100}")
"""A user or approver role name: what `user:<name>` and `role:<name>` entries can name."""


class InvalidRole(ValueError):
    pass


@record
class Principal:
    """Who is calling: the role, name, user and approver roles of their token."""

    role: str
    name: str | None = None
    user: str | None = None
    """The person who holds the token: approval votes are cast as `user:<user>`."""
    approver_roles: frozenset[str] = frozenset()
    """Business roles (`role:<name>` approvers) beside the API role."""
    token: str | None = None
    """The token's hash: whose machine-id leases (`engine.id_spaces`) and worker names
    (`engine.workers`) are whose."""

    @property
    def identity(self) -> str | None:
        """`user:<user>`, or None for a token without a user (it cannot decide)."""
        return None if self.user is None else f"user:{self.user}"

    @property
    def roles(self) -> frozenset[str]:
        """Every role an approval's `role:<name>` entry may match: the API role and the
        approver roles."""
        return frozenset({self.role, *self.approver_roles})

    @property
    def starter(self) -> str:
        """Who a run this caller starts is `started_by`: its identity, else the token's
        name or role (`token:<name or role>`)."""
        return self.identity or f"token:{self.name or self.role}"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_token(
    store: Any,
    role: str,
    name: str | None,
    now: float,
    *,
    user: str | None = None,
    approver_roles: Sequence[str] = (),
) -> str:
    """Store the hash of a new token for `role` (held by `user`, with business
    `approver_roles`); returns the token (shown once)."""
    if role not in ROLES:
        raise InvalidRole(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    for what, value in (("user", user), *(("approver role", r) for r in approver_roles)):
        if value is not None and not NAME.fullmatch(value):
            raise InvalidRole(f"{what} {value!r}: use letters, digits and . _ @ - (1 to 100)")
    token = new_token()
    store.create_token(
        token_hash(token), role, name, now, user=user, approver_roles=sorted(set(approver_roles))
    )
    return token


# what each permission admits (admin may do everything)
READ = frozenset({"admin", "operator", "approver", "viewer"})
READ_WORK = READ | {"worker"}
"""Commands and the catalog: readers and workers."""
WORK = frozenset({"admin", "worker"})
"""Claims, heartbeats, releases, event reports."""
OPERATE = frozenset({"admin", "operator"})
"""Register, execute, cancel, write credentials."""
RESOLVE = frozenset({"admin", "worker"})
"""Decrypted credential data."""


TOKEN_CACHE_TTL = 5.0
"""Seconds a token lookup is reused without asking the store. The price: a token revoked or
deleted in the store keeps working for at most this long on a server that saw it."""
TOKEN_CACHE_SIZE = 10_000
"""Most tokens one cache remembers; past it the oldest entry goes."""


class TokenCache:
    """Token hash -> (principal, expiry), for `TOKEN_CACHE_TTL` seconds.

    Only tokens the store knows are kept: an unknown token is asked about every time, so a
    token created a moment ago works at once and garbage tokens cannot crowd out real ones.
    It lives on `app.state` (one per app, for the app's store) and is used only from the
    event loop, so it needs no lock.
    """

    def __init__(
        self,
        store: Any,
        *,
        ttl: float = TOKEN_CACHE_TTL,
        size: int = TOKEN_CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.ttl = ttl
        self.size = size
        self.clock = clock
        self._entries: OrderedDict[str, tuple[Principal, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Principal | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        principal, expires = entry
        if self.clock() >= expires:
            del self._entries[key]
            return None
        return principal

    def put(self, key: str, principal: Principal) -> None:
        self._entries[key] = (principal, self.clock() + self.ttl)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    async def lookup(self, key: str) -> Principal | None:
        """The principal of a token hash: from the cache, else the store (in the thread pool)."""
        principal = self.get(key)
        if principal is None:
            row = await run_in_threadpool(self.store.get_token, key)
            if row is None:
                return None
            principal = Principal(
                role=str(row.role),
                name=row.name,
                user=row.user,
                approver_roles=frozenset(row.approver_roles),
                token=key,
            )
            self.put(key, principal)
        return principal


def token_cache(request: HTTPConnection) -> TokenCache:
    """The app's cache, made on first use; a new one when a new lifespan opened another store."""
    store = request.app.state.services.store
    cache: TokenCache | None = getattr(request.app.state, "token_cache", None)
    if cache is None or cache.store is not store:
        cache = TokenCache(store)
        request.app.state.token_cache = cache
    return cache


async def authenticate(request: HTTPConnection) -> Principal:
    """The caller of a request or of a WebSocket (its handshake's header)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", "missing bearer token (Authorization: Bearer <token>)")
    principal = await token_cache(request).lookup(token_hash(token.strip()))
    if principal is None:
        raise ApiError(401, "unauthorized", "unknown or revoked token")
    return principal


def authorize(principal: Principal, allowed: frozenset[str], what: str) -> Principal:
    """`principal`, or 403 when its role is not among `allowed` (`what`: the action)."""
    if principal.role not in allowed:
        raise ApiError(
            403, "forbidden", f"role {principal.role!r} may not {what}", role=principal.role
        )
    return principal


def _require(allowed: frozenset[str], what: str) -> Any:
    async def check(request: Request) -> Principal:
        return authorize(await authenticate(request), allowed, what)

    return Depends(check)


ReadAuth = Annotated[Principal, _require(READ, "read executions")]
ReadWorkAuth = Annotated[Principal, _require(READ_WORK, "read commands or the catalog")]
WorkAuth = Annotated[Principal, _require(WORK, "claim commands or report events")]
OperateAuth = Annotated[Principal, _require(OPERATE, "register, execute or cancel")]
ActAuth = Annotated[Principal, _require(OPERATE, "retry, skip, restart or re-run executions")]
CredentialWriteAuth = Annotated[Principal, _require(OPERATE, "write credentials")]
CredentialReadAuth = Annotated[Principal, _require(READ_WORK, "read credentials")]


# -- who may post which event --------------------------------------------------------------

APPROVE = frozenset({"admin", "approver"})
"""Approval decisions."""
ApproveAuth = Annotated[Principal, _require(APPROVE, "decide approvals")]

EVENT_ROLES: dict[str, frozenset[str]] = {
    ev.COMMAND_STARTED: WORK,
    ev.COMMAND_HEARTBEAT: WORK,
    ev.CALL_DONE: WORK,
    ev.CALL_ERROR: WORK,
    ev.COMMAND_COMPLETED: WORK,
    ev.COMMAND_FAILED: WORK,
    ev.EXECUTION_CANCEL_REQUESTED: OPERATE,
}
"""The roles that may post each client event type, through `POST /api/events[/batch]` and
the worker channel: those of the route that makes the same change (a cancel request:
`POST /api/executions/{id}/cancel`), so the event routes are no way around a route's role.
Types not listed are written by the engine only (422, `milepost.api.ingest`): among them
`command.claimed` and `command.released`, which the store writes with the claim itself,
and every `approval.*` event: a vote goes through `POST /api/approvals/{id}/decision`,
where the engine checks who may decide (an event route would be a way around that)."""
POST_EVENTS = frozenset().union(*EVENT_ROLES.values())
"""Who may call the event routes at all: everyone who may post some event type."""


def authorize_events(principal: Principal, event_types: Sequence[str], batch: bool) -> None:
    """403 naming the role, the event type and where, for the first event of a request that
    `principal` may not post (nothing of the request is stored)."""
    for i, name in enumerate(event_types):
        etype = ev.canonical_type(name)
        # a type the engine does not know is a worker's informative event (DSL 12.3)
        allowed = EVENT_ROLES.get(etype, WORK if etype not in ev.EVENT_TYPES else None)
        if allowed is None or principal.role in allowed:
            # a type no role may post is the validation's to refuse (422): `ingest` refuses
            # every type missing here, so nothing unlisted gets through
            continue
        loc: list[str | int] = (
            ["body", "events", i, "event_type"] if batch else ["body", "event_type"]
        )
        raise ApiError(
            403,
            "forbidden",
            f"role {principal.role!r} may not post {etype!r} events ({'.'.join(map(str, loc))})",
            role=principal.role,
            event_type=etype,
            loc=loc,
        )


EventAuth = Annotated[Principal, _require(POST_EVENTS, "post events")]
