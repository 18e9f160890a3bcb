"""`/docs`, `/redoc`, `/openapi.json`: behind a token, usable from a browser through the
login cookie, and with every asset served by the server itself (issue 8, item 9)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from milepost.api.routers import docs
from tests.api.support import Api, error, start_server

PAGES = ("/docs", "/redoc", "/openapi.json")
CONTENT_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".png": "image/png",
    ".json": "application/json",
}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    with start_server(f"sqlite:///{tmp_path / 'docs.db'}") as server:
        yield server


def referenced_urls(html: str) -> list[str]:
    """Every URL a page loads: src and href attributes, and Swagger UI's `url: '...'`."""
    found = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    found += re.findall(r"""\burl\s*:\s*["']([^"']+)["']""", html)
    found += re.findall(r"""spec-url\s*=\s*["']([^"']+)["']""", html)
    return found


def test_the_documentation_needs_a_token(api: Api) -> None:
    for path in (*PAGES, "/docs/assets/swagger-ui-bundle.js"):
        body = error(api.get(path, role=None), 401, "unauthorized")
        assert body["login"] == "/docs/login" and "/docs/login" in body["message"], path
        error(api.client.get(path, headers={"Authorization": "Bearer nope"}), 401, "unauthorized")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_pages_load_only_same_origin_assets_and_each_answers(api: Api, page: str) -> None:
    response = api.get(page, role="viewer")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    assert "http://" not in html and "https://" not in html  # no CDN, no fonts, no validator
    urls = referenced_urls(html)
    assert "/openapi.json" in urls and any(u.endswith(".js") for u in urls), urls
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        asset = api.get(url, role="viewer")
        assert asset.status_code == 200, (url, asset.status_code)
        expected = CONTENT_TYPES[Path(url).suffix]
        assert asset.headers["content-type"].startswith(expected), (url, asset.headers)
        assert len(asset.content) > 1000 or url.endswith(".png"), url


def test_the_schema_declares_the_bearer_token(api: Api) -> None:
    spec = api.get("/openapi.json", role="worker").json()
    assert spec["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "A token from `milepost token create`.",
    }
    assert spec["security"] == [{"bearer": []}]
    assert spec["paths"]["/health"]["get"]["security"] == []
    assert not any(p.startswith(("/docs", "/redoc", "/openapi")) for p in spec["paths"])


def test_only_the_listed_assets_are_served(api: Api) -> None:
    for name in ("core.py", "..%2Fcore.py", "nope.js"):
        error(api.get(f"/docs/assets/{name}"), 404, "not_found")


def test_a_browser_signs_in_with_a_form_and_reads_the_docs_by_cookie(api: Api) -> None:
    client = api.client
    form = client.get("/docs/login")
    assert form.status_code == 200 and 'method="post"' in form.text
    assert "http://" not in form.text and "https://" not in form.text

    refused = client.post("/docs/login", data={"token": "mp_wrong"}, follow_redirects=False)
    assert refused.status_code == 401 and "set-cookie" not in refused.headers
    assert docs.COOKIE not in client.cookies

    token = api.tokens["viewer"]
    signed = client.post(
        "/docs/login",
        data={"token": token, "next": "https://evil.example/"},
        follow_redirects=False,
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/docs"
    cookie = signed.headers["set-cookie"]
    assert cookie.startswith(f"{docs.COOKIE}=") and "HttpOnly" in cookie
    assert "samesite=strict" in cookie.lower() and token not in signed.headers["location"]

    for path in (*PAGES, "/docs/assets/swagger-ui.css"):  # the cookie alone, no header
        assert client.get(path).status_code == 200, path
    # the cookie opens the documentation only, never the API
    error(client.get("/api/executions"), 401, "unauthorized")
    to_redoc = client.post(
        "/docs/login", data={"token": token, "next": "/redoc"}, follow_redirects=False
    )
    assert to_redoc.headers["location"] == "/redoc"

    client.cookies.clear()
    client.cookies.set(docs.COOKIE, "mp_revoked")
    body = error(client.get("/docs"), 401, "unauthorized")
    assert body["login"] == "/docs/login"
    client.cookies.clear()


def test_a_login_form_past_its_size_is_refused(api: Api) -> None:
    response = api.client.post(
        "/docs/login",
        content=b"token=" + b"x" * docs.MAX_LOGIN_BODY,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    error(response, 413, "too_large")


def test_every_id_list_of_an_ingest_reply_is_declared_as_ids(api: Api) -> None:
    spec = api.get("/openapi.json", role="worker").json()
    fields = spec["components"]["schemas"]["IngestOut"]["properties"]
    for name in ("event_ids", "stale", "ignored", "stored_ids", "duplicates"):
        assert "pattern" in fields[name]["items"], (name, fields[name])
