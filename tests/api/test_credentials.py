"""Credentials: encrypted at rest, data only for worker and admin."""

from __future__ import annotations

from tests.api.support import Api, error, ok

SECRET = "s3cr3t-Passw0rd-value"


def test_credentials_round_trip_and_only_workers_and_admins_see_the_data(api: Api) -> None:
    body = {"name": "pg_main", "type": "postgres", "data": {"user": "ada", "password": SECRET}}
    meta = ok(api.post("/api/credentials", body, role="operator"))
    assert meta["name"] == "pg_main" and meta["type"] == "postgres" and meta["data"] is None
    assert SECRET not in str(meta)
    listed = ok(api.get("/api/credentials", role="viewer"))["items"]
    assert [(c["name"], c["type"], c["data"]) for c in listed] == [("pg_main", "postgres", None)]
    for role in ("viewer", "operator", "approver"):
        plain = ok(api.get("/api/credentials/pg_main", role=role))
        assert plain["data"] is None and SECRET not in str(plain)
        error(
            api.get("/api/credentials/pg_main", role=role, params={"include_data": "true"}),
            403,
            "forbidden",
        )
    for role in ("worker", "admin"):
        full = ok(api.get("/api/credentials/pg_main", role=role, params={"include_data": "true"}))
        assert full["data"]["password"] == SECRET and full["data"]["user"] == "ada"
    row = api.store.get_credential("pg_main")
    raw = bytes(row.ciphertext)
    assert SECRET.encode() not in raw and b"ada" not in raw and len(raw) > 40


def test_replace_delete_and_unknown_credentials(api: Api) -> None:
    ok(api.post("/api/credentials", {"name": "k", "type": "http", "data": {"token": "a" * 10}}))
    ok(api.post("/api/credentials", {"name": "k", "type": "http", "data": {"token": "b" * 10}}))
    full = ok(api.get("/api/credentials/k", role="worker", params={"include_data": True}))
    assert full["data"]["token"] == "b" * 10
    assert ok(api.call("DELETE", "/api/credentials/k", role="operator")) == {"deleted": True}
    error(api.get("/api/credentials/k"), 404, "not_found")
    error(api.call("DELETE", "/api/credentials/k"), 404, "not_found")
    error(
        api.get("/api/credentials/nope", role="worker", params={"include_data": True}),
        404,
        "not_found",
    )


def test_a_malformed_credential_is_422_and_nothing_is_stored(api: Api) -> None:
    for body in (
        {"name": "x", "type": "t"},
        {"name": "", "type": "t", "data": {}},
        {"name": "x", "type": "t", "data": "secret"},
        {"name": "x", "data": {}},
    ):
        error(api.post("/api/credentials", body), 422, "validation_error")
    assert api.store.list_credentials() == []
