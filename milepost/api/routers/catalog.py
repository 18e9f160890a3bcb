"""The catalog: register playbooks, list them, read one back."""

from __future__ import annotations

from fastapi import APIRouter

from milepost.api import errors, schemas, views
from milepost.api.auth import OperateAuth, ReadWorkAuth
from milepost.api.deps import RuntimeDep, ServicesDep, StoreDep
from milepost.api.errors import AUTH, BODY
from milepost.playbook import load, yamllines
from milepost.store import port

router = APIRouter(prefix="/api/catalog", tags=["catalog"])


@router.post("/register", responses=errors.responses(*AUTH, *BODY))
def register(body: schemas.RegisterIn, runtime: RuntimeDep, services: ServicesDep,
             _: OperateAuth) -> schemas.CatalogEntryOut:  # fmt: skip
    """Validate and store a playbook; a new version only if its text changed."""
    limits = yamllines.Limits.of(services.settings)
    # PlaybookInvalid -> 422 + problems
    playbook = load.load_text(body.content, source="api", limits=limits)
    path, version = runtime.register(body.content, playbook)
    entry = runtime.store.get_playbook(path, version)
    assert entry is not None
    return views.catalog_entry(entry)


@router.post("/list", responses=errors.responses(*AUTH, *BODY))
def list_entries(body: schemas.ListIn, store: StoreDep, _: ReadWorkAuth) -> schemas.CatalogListOut:
    entries = [views.catalog_entry(e) for e in store.list_playbooks()
               if body.path is None or e.path == body.path]  # fmt: skip
    return schemas.CatalogListOut(entries=entries)


@router.post("/resource", responses=errors.responses(*AUTH, *BODY, 404))
def resource(body: schemas.CatalogRef, store: StoreDep,
             _: ReadWorkAuth) -> schemas.CatalogResourceOut:  # fmt: skip
    entry = find(store, body)
    return schemas.CatalogResourceOut(**views.catalog_entry(entry).model_dump(),
                                      content=entry.content)  # fmt: skip


def find(store: port.Store, ref: schemas.CatalogRef) -> port.CatalogEntry:
    """The catalog entry `ref` names, or 422 (malformed catalog_id) / 404."""
    try:
        path, version = ref.key()
    except ValueError as exc:
        raise errors.invalid([{"loc": ["body", "catalog_id"], "msg": str(exc)}]) from None
    entry = store.get_playbook(path, version)
    if entry is None:
        which = f"{path!r}" + (f" version {version}" if version is not None else "")
        raise errors.not_found("playbook_not_found", f"no playbook {which} in the catalog",
                               path=path, version=version)  # fmt: skip
    return entry
