"""Credentials: encrypted at rest; the data is returned only to the worker and admin roles."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from milepost.api import checks, errors, schemas
from milepost.api.auth import RESOLVE, CredentialReadAuth, CredentialWriteAuth
from milepost.api.deps import StoreDep, VaultDep
from milepost.api.errors import AUTH, BODY
from milepost.store import port

router = APIRouter(prefix="/api/credentials", tags=["credentials"])

Name = Annotated[str, Path(min_length=1, max_length=200, pattern=checks.NO_NUL_PATTERN)]


def _meta(row: port.CredentialRow) -> schemas.CredentialOut:
    return schemas.CredentialOut(name=row.name, type=row.type,
                                 created_at=checks.iso(row.created_at),
                                 updated_at=checks.iso(row.updated_at))  # fmt: skip


def _missing(name: str) -> errors.ApiError:
    return errors.not_found("not_found", f"no credential {name!r}", name=name)


@router.post("", responses=errors.responses(*AUTH, *BODY))
def put_credential(body: schemas.CredentialIn, vault: VaultDep, store: StoreDep,
                   _: CredentialWriteAuth) -> schemas.CredentialOut:  # fmt: skip
    """Create or replace a credential; answers its metadata, never the data."""
    vault.put(body.name, body.type, body.data)
    row = store.get_credential(body.name)
    assert row is not None
    return _meta(row)


@router.get("", responses=errors.responses(*AUTH))
def list_credentials(store: StoreDep, _: CredentialReadAuth) -> schemas.CredentialList:
    return schemas.CredentialList(items=[_meta(row) for row in store.list_credentials()])


@router.get("/{name}", responses=errors.responses(*AUTH, 404, 422))
def get_credential(name: Name, store: StoreDep, vault: VaultDep, principal: CredentialReadAuth,
                   include_data: Annotated[bool, Query()] = False) -> schemas.CredentialOut:  # fmt: skip
    if include_data and principal.role not in RESOLVE:
        raise errors.ApiError(403, "forbidden", f"role {principal.role!r} may not read "
                              "credential data (include_data is for worker and admin)",
                              role=principal.role)  # fmt: skip
    row = store.get_credential(name)
    if row is None:
        raise _missing(name)
    out = _meta(row)
    if include_data:
        out.data = vault.get(name)
    return out


@router.delete("/{name}", responses=errors.responses(*AUTH, 404, 422))
def delete_credential(name: Name, vault: VaultDep, _: CredentialWriteAuth) -> schemas.DeletedOut:
    if not vault.delete(name):
        raise _missing(name)
    return schemas.DeletedOut(deleted=True)
