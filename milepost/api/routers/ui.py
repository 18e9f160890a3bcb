"""The web UI: the files `npm run build` wrote into `milepost/web/dist`, served at `/ui/`.

Open routes: the pages hold no data; the app asks for a token and sends it to /api. Any
path under /ui/ that is not a file is a client route of the single-page app, so it gets
`index.html` (a reload of /ui/runs/123 works); a missing asset is a 404. The hashed
assets are cached for good, `index.html` never (a new build is seen at once).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from milepost.api import errors

router = APIRouter(include_in_schema=False)

DIST = Path(__file__).resolve().parent.parent.parent / "web" / "dist"
ASSETS = "assets/"
NOT_BUILT = (
    "the web UI is not built: run `make install` (npm ci && npm run build in ui/), "
    "or install a wheel that carries it"
)


@router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui")
def ui_bare() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui/{path:path}")
def ui_file(path: str) -> FileResponse:
    return serve(DIST, path)


def serve(dist: Path, path: str) -> FileResponse:
    """The file `path` of `dist`, else (a client route) its index.html."""
    index = dist / "index.html"
    if not index.is_file():
        raise errors.not_found("ui_not_built", NOT_BUILT, dist=str(dist))
    if path:
        wanted = (dist / path).resolve()
        inside = wanted.is_relative_to(dist.resolve())
        if inside and wanted.is_file():
            immutable = path.startswith(ASSETS)
            return FileResponse(
                wanted,
                headers={
                    "Cache-Control": (
                        "public, max-age=31536000, immutable" if immutable else "no-cache"
                    )
                },
            )
        if path.startswith(ASSETS) or not inside:
            raise errors.not_found(
                "ui_file_not_found", f"no file {path!r} in the web UI", path=path
            )
    return FileResponse(index, headers={"Cache-Control": "no-cache"})
