"""Bearer tokens and roles (docs/server-contract.md, Auth).

A token is 32 random bytes in url-safe base64; the store keeps only its SHA-256, so a
leaked database does not hand out access. Each route declares what it needs with one of
the `*Auth` aliases below; `GET /health` needs nothing.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from milepost.api.errors import ApiError

ROLES = ("admin", "operator", "approver", "worker", "viewer")
TOKEN_PREFIX = "mp_"


class InvalidRole(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the role and name of their token."""

    role: str
    name: str | None = None


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_token(store: Any, role: str, name: str | None, now: float) -> str:
    """Store the hash of a new token for `role`; returns the token (shown once)."""
    if role not in ROLES:
        raise InvalidRole(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    token = new_token()
    store.create_token(token_hash(token), role, name, now)
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


def authenticate(request: Request) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", "missing bearer token (Authorization: Bearer <token>)")
    store = request.app.state.services.store
    row = store.get_token(token_hash(token.strip()))
    if row is None:
        raise ApiError(401, "unauthorized", "unknown or revoked token")
    return Principal(role=str(row.role), name=getattr(row, "name", None))


def _require(allowed: frozenset[str], what: str) -> Any:
    def check(request: Request) -> Principal:
        principal = authenticate(request)
        if principal.role not in allowed:
            raise ApiError(403, "forbidden", f"role {principal.role!r} may not {what}",
                           role=principal.role)  # fmt: skip
        return principal

    return Depends(check)


ReadAuth = Annotated[Principal, _require(READ, "read executions")]
ReadWorkAuth = Annotated[Principal, _require(READ_WORK, "read commands or the catalog")]
WorkAuth = Annotated[Principal, _require(WORK, "claim commands or report events")]
OperateAuth = Annotated[Principal, _require(OPERATE, "register, execute or cancel")]
CredentialWriteAuth = Annotated[Principal, _require(OPERATE, "write credentials")]
CredentialReadAuth = Annotated[Principal, _require(READ_WORK, "read credentials")]
