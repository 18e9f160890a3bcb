"""The catalog: register playbooks, list them, read one back; validate a text without
storing it."""

from __future__ import annotations

from fastapi import APIRouter

from milepost.api import errors, schemas, schemas_catalog, views
from milepost.api.auth import OperateAuth, ReadWorkAuth
from milepost.api.deps import EngineDep, ServicesDep
from milepost.api.errors import AUTH, BODY, ApiError
from milepost.engine.lifecycle import CatalogEntry, Lifecycle
from milepost.errors import PlaybookInvalid
from milepost.playbook import load, problems, yamllines

router = APIRouter(prefix="/api/catalog", tags=["catalog"])


@router.post("/register", responses=errors.responses(*AUTH, *BODY))
def register(
    body: schemas.RegisterIn, engine: EngineDep, services: ServicesDep, _: OperateAuth
) -> schemas.CatalogEntryOut:
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


@router.post(
    "/validate",
    responses={
        **errors.responses(*AUTH, *BODY),
        422: {
            "model": schemas_catalog.InvalidOut,
            "description": "The body is invalid "
            "(`validation_error`), or the text (`playbook_invalid`, with `problems`).",
        },
    },
)
def validate(
    body: schemas_catalog.ValidateIn, services: ServicesDep, _: ReadWorkAuth
) -> schemas_catalog.ValidateOut:
    """Check a playbook text as `register` (and `milepost validate`) would, storing nothing:
    200 with its warnings, or 422 `playbook_invalid` whose `problems` carry the line, step
    and field of each, for marking them on the text."""
    limits = yamllines.Limits.of(services.settings)
    try:
        playbook = load.load_text(body.content, source="api", limits=limits)
    except PlaybookInvalid as exc:
        raise _invalid(exc.problems) from None
    warnings = list(playbook.warnings)
    if warnings and (body.strict or services.settings.strict_playbooks):  # DSL 12.2
        raise _invalid(warnings)
    return schemas_catalog.ValidateOut(
        valid=True, steps=len(playbook.steps), warnings=[_problem(w) for w in warnings]
    )


def _problem(message: str) -> schemas_catalog.ProblemOut:
    p = problems.parts(message)
    return schemas_catalog.ProblemOut(
        message=p.message, line=p.line, step=p.step, scope=p.scope, field=p.field
    )


def _invalid(found: list[str]) -> ApiError:
    """`register`'s refusal, with each problem's parts instead of its text alone."""
    return ApiError(
        422,
        "playbook_invalid",
        f"{len(found)} problem(s): {found[0]}",
        problems=[_problem(m).model_dump() for m in found],
    )


@router.post("/list", responses=errors.responses(*AUTH, *BODY))
def list_entries(
    body: schemas.ListIn, engine: EngineDep, _: ReadWorkAuth
) -> schemas.CatalogListOut:
    entries = [
        views.catalog_entry(e)
        for e in engine.catalog_entries()
        if body.path is None or e.path == body.path
    ]
    return schemas.CatalogListOut(entries=entries)


@router.post("/resource", responses=errors.responses(*AUTH, *BODY, 404))
def resource(
    body: schemas.CatalogRef, engine: EngineDep, _: ReadWorkAuth
) -> schemas.CatalogResourceOut:
    entry = find(engine, body)
    return schemas.CatalogResourceOut(
        **views.catalog_entry(entry).model_dump(), content=entry.content
    )


def find(engine: Lifecycle, ref: schemas.CatalogRef) -> CatalogEntry:
    """The catalog entry `ref` names, or 422 (malformed catalog_id) / 404."""
    try:
        path, version = ref.key()
    except ValueError as exc:
        raise errors.invalid([{"loc": ["body", "catalog_id"], "msg": str(exc)}]) from None
    entry = engine.catalog_entry(path, version)
    if entry is None:
        which = f"{path!r}" + (f" version {version}" if version is not None else "")
        raise errors.not_found(
            "playbook_not_found", f"no playbook {which} in the catalog", path=path, version=version
        )
    return entry
