"""Credentials: encrypted at rest; the data is returned only to the worker and admin roles."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from milepost.api import checks, errors, schemas
from milepost.api.auth import RESOLVE, CredentialReadAuth, CredentialWriteAuth
from milepost.api.deps import VaultDep
from milepost.api.errors import AUTH, BODY

router = APIRouter(prefix="/api/credentials", tags=["credentials"])

Name = Annotated[str, Path(min_length=1, max_length=200, pattern=checks.NO_NUL_PATTERN)]


def _meta(info: dict[str, Any]) -> schemas.CredentialOut:
    """A credential's metadata (`Vault.info`, `Vault.list`) as the API shows it."""
    return schemas.CredentialOut(
        name=info["name"],
        type=info["type"],
        created_at=checks.iso(info["created_at"]),
        updated_at=checks.iso(info["updated_at"]),
    )


def _missing(name: str) -> errors.ApiError:
    return errors.not_found("not_found", f"no credential {name!r}", name=name)


@router.post("", responses=errors.responses(*AUTH, *BODY))
def put_credential(
    body: schemas.CredentialIn, vault: VaultDep, _: CredentialWriteAuth
) -> schemas.CredentialOut:
    """Create or replace a credential; answers its metadata, never the data."""
    vault.put(body.name, body.type, body.data)
    info = vault.info(body.name)
    assert info is not None
    return _meta(info)


@router.get("", responses=errors.responses(*AUTH))
def list_credentials(vault: VaultDep, _: CredentialReadAuth) -> schemas.CredentialList:
    return schemas.CredentialList(items=[_meta(info) for info in vault.list()])


@router.get("/{name}", responses=errors.responses(*AUTH, 404, 422))
def get_credential(
    name: Name,
    vault: VaultDep,
    principal: CredentialReadAuth,
    include_data: Annotated[bool, Query()] = False,
) -> schemas.CredentialOut:
    if include_data and principal.role not in RESOLVE:
        raise errors.ApiError(
            403,
            "forbidden",
            f"role {principal.role!r} may not read "
            "credential data (include_data is for worker and admin)",
            role=principal.role,
        )
    info = vault.info(name)
    if info is None:
        raise _missing(name)
    out = _meta(info)
    if include_data:
        out.data = vault.get(name)
    return out


@router.delete("/{name}", responses=errors.responses(*AUTH, 404, 422))
def delete_credential(name: Name, vault: VaultDep, _: CredentialWriteAuth) -> schemas.DeletedOut:
    if not vault.delete(name):
        raise _missing(name)
    return schemas.DeletedOut(deleted=True)
