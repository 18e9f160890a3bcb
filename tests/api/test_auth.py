"""Bearer tokens and roles: 401 without a valid token, 403 for a role that may not."""

from __future__ import annotations

import pytest

from milepost.api import auth
from tests.api.support import ROLES, Api, error, ok

# (method, path, body, roles allowed); bodies are valid enough to pass auth and fail later
ROUTES = [
    ("GET", "/metrics", None, {"admin", "operator", "approver", "viewer"}),
    ("POST", "/api/catalog/register", {"content": "x"}, {"admin", "operator"}),
    ("POST", "/api/catalog/list", {}, set(ROLES)),
    ("POST", "/api/catalog/resource", {"path": "nope"}, set(ROLES)),
    ("POST", "/api/execute", {"path": "nope"}, {"admin", "operator"}),
    ("GET", "/api/executions", None, {"admin", "operator", "approver", "viewer"}),
    ("GET", "/api/executions/1", None, {"admin", "operator", "approver", "viewer"}),
    ("GET", "/api/executions/1/status", None, {"admin", "operator", "approver", "viewer"}),
    ("POST", "/api/executions/1/cancel", {}, {"admin", "operator"}),
    ("POST", "/api/events", {"execution_id": 1, "event_type": "call.done"}, {"admin", "worker"}),
    ("POST", "/api/events/batch", {"events": []}, {"admin", "worker"}),
    ("GET", "/api/commands/1", None, set(ROLES)),
    ("POST", "/api/commands/1/claim", {"worker_id": "w"}, {"admin", "worker"}),
    ("POST", "/api/commands/claim", {"worker_id": "w"}, {"admin", "worker"}),
    ("POST", "/api/commands/1/heartbeat", {"worker_id": "w", "epoch": 1}, {"admin", "worker"}),
    ("POST", "/api/commands/1/release", {"worker_id": "w", "epoch": 1}, {"admin", "worker"}),
    ("POST", "/api/credentials", {"name": "c", "type": "t", "data": {}}, {"admin", "operator"}),
    ("GET", "/api/credentials", None, set(ROLES)),
    ("GET", "/api/credentials/c", None, set(ROLES)),
    ("DELETE", "/api/credentials/c", None, {"admin", "operator"}),
    ("GET", "/docs", None, set(ROLES)),
    ("GET", "/redoc", None, set(ROLES)),
    ("GET", "/openapi.json", None, set(ROLES)),
]


def test_health_is_open(api: Api) -> None:
    assert ok(api.get("/health", role=None)) == {"status": "ok"}


def test_every_route_but_health_needs_a_token(api: Api) -> None:
    for method, path, body, _allowed in ROUTES:
        response = api.call(method, path, role=None, json=body)
        error(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("header", ["Bearer nope", "Basic abc", "Bearer ", "token"])
def test_a_bad_or_unknown_token_is_401(api: Api, header: str) -> None:
    response = api.client.get("/api/executions", headers={"Authorization": header})
    error(response, 401, "unauthorized")


def test_each_role_gets_403_exactly_where_the_table_says(api: Api) -> None:
    for method, path, body, allowed in ROUTES:
        for role in ROLES:
            response = api.call(method, path, role=role, json=body)
            if role in allowed:
                assert response.status_code not in (401, 403), (method, path, role, response.text)
            else:
                body_ = error(response, 403, "forbidden")
                assert body_["role"] == role and role in body_["message"], (method, path, role)


def test_the_store_keeps_only_the_hash_of_a_token(api: Api) -> None:
    token = api.tokens["viewer"]
    row = api.store.get_token(auth.token_hash(token))
    assert row is not None and row.role == "viewer" and row.name == "test-viewer"
    assert token not in row.token_hash and api.store.get_token(token) is None


def test_create_token_refuses_an_unknown_role(api: Api) -> None:
    with pytest.raises(auth.InvalidRole):
        auth.create_token(api.store, "root", None, 1.0)
