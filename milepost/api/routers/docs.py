"""`/docs` (Swagger UI), `/redoc` and `/openapi.json`, behind a token, with no CDN.

The pages need a token like every route but `/health`. A browser cannot add a bearer header
when it opens a page, so these routes (and only these) also take the token from an
HttpOnly cookie, set by the small form at `/docs/login` (a POST: the token never appears in
a URL, so neither in access logs nor in the browser's history). Swagger UI's and ReDoc's
JavaScript and CSS are served from the `fastapi-offline` package, so the pages work on a
machine without internet.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs

import fastapi_offline
from fastapi import APIRouter, Depends, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.requests import HTTPConnection

from milepost.api.auth import Principal, authenticate, token_cache, token_hash
from milepost.api.errors import ApiError

router = APIRouter(include_in_schema=False)

COOKIE = "milepost_docs"
"""The cookie that carries the token of a person reading the docs in a browser."""
COOKIE_MAX_AGE = 12 * 3600
LOGIN = "/docs/login"
ASSETS = "/docs/assets"
MAX_LOGIN_BODY = 4096
_PAGES = ("/docs", "/redoc")

_STATIC = Path(fastapi_offline.__file__).parent / "static"
_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
"""The files served, with their content types: nothing else of the package is reachable."""


def _root(request: HTTPConnection) -> str:
    return str(request.scope.get("root_path") or "")


async def authenticate_docs(request: Request) -> Principal:
    """The bearer header if there is one, else the cookie of `/docs/login`."""
    token = request.cookies.get(COOKIE)
    if request.headers.get("authorization") or not token:
        try:
            return await authenticate(request)
        except ApiError as exc:  # say where a person signs in
            raise ApiError(
                exc.status,
                exc.code,
                f"{exc.message}; in a browser, sign in at {_root(request)}{LOGIN}",
                login=_root(request) + LOGIN,
            ) from None
    principal = await token_cache(request).lookup(token_hash(token))
    if principal is None:
        raise ApiError(
            401,
            "unauthorized",
            f"unknown or revoked token; sign in again at {_root(request)}{LOGIN}",
            login=_root(request) + LOGIN,
        )
    return principal


DocsAuth = Annotated[Principal, Depends(authenticate_docs)]


def openapi_schema(request: Request) -> dict[str, Any]:
    """The app's schema, declaring the bearer token so Swagger UI's "Authorize" sends it."""
    schema: dict[str, Any] = request.app.openapi()  # cached by FastAPI: changed once
    schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
    if "bearer" not in schemes:
        schemes["bearer"] = {
            "type": "http",
            "scheme": "bearer",
            "description": "A token from `milepost token create`.",
        }
        schema["security"] = [{"bearer": []}]
        for operation in schema.get("paths", {}).get("/health", {}).values():
            operation["security"] = []
    return schema


@router.get("/openapi.json")
async def openapi(request: Request, _: DocsAuth) -> JSONResponse:
    return JSONResponse(openapi_schema(request))


@router.get("/docs")
async def swagger_ui(request: Request, _: DocsAuth) -> HTMLResponse:
    root = _root(request)
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json",
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
        # no badge that sends the schema to the public validator
        swagger_ui_parameters={"validatorUrl": None},
    )


@router.get("/redoc")
async def redoc(request: Request, _: DocsAuth) -> HTMLResponse:
    root = _root(request)
    return get_redoc_html(
        openapi_url=f"{root}/openapi.json",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
        with_google_fonts=False,
    )


@router.get(ASSETS + "/{name}")
async def asset(name: str, _: DocsAuth) -> FileResponse:
    media_type = _ASSETS.get(name)
    if media_type is None:
        raise ApiError(404, "not_found", f"no documentation asset {name!r}", name=name)
    return FileResponse(
        _STATIC / name, media_type=media_type, headers={"Cache-Control": "private, max-age=3600"}
    )


@router.get(LOGIN)
async def login_form(request: Request, next: str = "/docs") -> HTMLResponse:  # noqa: A002
    """Open, like `/health`: a form that reveals nothing."""
    return _login_page(request, _next(next))


@router.post(LOGIN)
async def login(request: Request) -> Response:
    """Check the token and keep it in an HttpOnly cookie for the documentation pages."""
    form = parse_qs((await _small_body(request)).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    target = _next((form.get("next") or ["/docs"])[0])
    if not token or await token_cache(request).lookup(token_hash(token)) is None:
        return _login_page(request, target, "Unknown or revoked token.", status=401)
    response = RedirectResponse(_root(request) + target, status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        max_age=COOKIE_MAX_AGE,
        path=_root(request) + "/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


def _next(value: str) -> str:
    """Where to go after signing in: one of the pages, never another site."""
    return value if value in _PAGES else "/docs"


async def _small_body(request: Request) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_LOGIN_BODY:
            raise ApiError(
                413,
                "too_large",
                f"the login form takes at most {MAX_LOGIN_BODY} bytes",
                limit=MAX_LOGIN_BODY,
            )
    return body


def _login_page(
    request: Request, target: str, problem: str = "", *, status: int = 200
) -> HTMLResponse:
    note = f'<p role="alert">{escape(problem)}</p>' if problem else ""
    html = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{escape(request.app.title)} - sign in</title></head>
<body style="font-family: sans-serif; max-width: 32em; margin: 4em auto">
<h1>{escape(request.app.title)} API documentation</h1>{note}
<form method="post" action="{escape(_root(request) + LOGIN)}">
<label>Token <input type="password" name="token" autocomplete="off" required autofocus></label>
<input type="hidden" name="next" value="{escape(target)}">
<button type="submit">Sign in</button>
</form>
<p>A token from <code>milepost token create</code>; it is kept in an HttpOnly cookie for
the documentation pages only (the API itself takes the <code>Authorization</code> header).</p>
</body></html>"""
    return HTMLResponse(html, status_code=status)
