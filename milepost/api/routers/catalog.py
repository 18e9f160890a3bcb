"""The catalog: register playbooks, list them, read one back."""

from __future__ import annotations

from fastapi import APIRouter

from milepost.api import errors, schemas, views
from milepost.api.auth import OperateAuth, ReadWorkAuth
from milepost.api.deps import EngineDep, ServicesDep
from milepost.api.errors import AUTH, BODY
from milepost.engine.lifecycle import CatalogEntry, Lifecycle
from milepost.errors import PlaybookInvalid
from milepost.playbook import load, yamllines

router = APIRouter(prefix="/api/catalog", tags=["catalog"])


@router.post("/register", responses=errors.responses(*AUTH, *BODY))
def register(body: schemas.RegisterIn, engine: EngineDep, services: ServicesDep,
             _: OperateAuth) -> schemas.CatalogEntryOut:  # fmt: skip
    """Validate and store a playbook; a new version only if its text changed."""
    limits = yamllines.Limits.of(services.settings)
    # PlaybookInvalid -> 422 + problems
    playbook = load.load_text(body.content, source="api", limits=limits)
    if services.settings.strict_playbooks and playbook.warnings:  # DSL 12.2: warnings refuse
        raise PlaybookInvalid(list(playbook.warnings), "api")
    path, version = engine.register(body.content, playbook)
    entry = engine.catalog_entry(path, version)
    assert entry is not None
    return views.catalog_entry(entry)


@router.post("/list", responses=errors.responses(*AUTH, *BODY))
def list_entries(body: schemas.ListIn, engine: EngineDep,
                 _: ReadWorkAuth) -> schemas.CatalogListOut:  # fmt: skip
    entries = [views.catalog_entry(e) for e in engine.catalog_entries()
               if body.path is None or e.path == body.path]  # fmt: skip
    return schemas.CatalogListOut(entries=entries)


@router.post("/resource", responses=errors.responses(*AUTH, *BODY, 404))
def resource(body: schemas.CatalogRef, engine: EngineDep,
             _: ReadWorkAuth) -> schemas.CatalogResourceOut:  # fmt: skip
    entry = find(engine, body)
    return schemas.CatalogResourceOut(**views.catalog_entry(entry).model_dump(),
                                      content=entry.content)  # fmt: skip


def find(engine: Lifecycle, ref: schemas.CatalogRef) -> CatalogEntry:
    """The catalog entry `ref` names, or 422 (malformed catalog_id) / 404."""
    try:
        path, version = ref.key()
    except ValueError as exc:
        raise errors.invalid([{"loc": ["body", "catalog_id"], "msg": str(exc)}]) from None
    entry = engine.catalog_entry(path, version)
    if entry is None:
        which = f"{path!r}" + (f" version {version}" if version is not None else "")
        raise errors.not_found("playbook_not_found", f"no playbook {which} in the catalog",
                               path=path, version=version)  # fmt: skip
    return entry
