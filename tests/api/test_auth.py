"""Bearer tokens and roles: 401 without a valid token, 403 for a role that may not."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.routing import APIWebSocketRoute, iter_route_contexts
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocketDisconnect

from milepost.api import auth
from tests.api.support import ROLES, Api, error, ok

OPEN = None
"""No token needed."""
READ = {"admin", "operator", "approver", "viewer"}
POSTERS = {"admin", "operator", "worker"}
"""Who may call the event routes at all (which event types, `auth.EVENT_ROLES` decides)."""

# (method, path template) -> (path, body, roles allowed, status for them): every route of
# the app has a row; the bodies pass auth and are answered the same for every allowed role
ROUTES: dict[tuple[str, str], tuple[str, Any, set[str] | None, int]] = {
    ("GET", "/health"): ("/health", None, OPEN, 200),
    ("GET", "/openapi.json"): ("/openapi.json", None, set(ROLES), 200),
    ("GET", "/docs"): ("/docs", None, set(ROLES), 200),
    ("GET", "/redoc"): ("/redoc", None, set(ROLES), 200),
    ("GET", "/docs/assets/{name}"): ("/docs/assets/swagger-ui.css", None, set(ROLES), 200),
    ("GET", "/docs/login"): ("/docs/login", None, OPEN, 200),
    ("POST", "/docs/login"): ("/docs/login", None, OPEN, 401),
    ("GET", "/metrics"): ("/metrics", None, READ, 200),
    ("POST", "/api/catalog/register"): (
        "/api/catalog/register",
        {"content": "x"},
        {"admin", "operator"},
        422,
    ),
    ("POST", "/api/catalog/list"): ("/api/catalog/list", {}, set(ROLES), 200),
    ("POST", "/api/catalog/resource"): ("/api/catalog/resource", {"path": "nope"}, set(ROLES), 404),
    ("POST", "/api/catalog/validate"): ("/api/catalog/validate", {"content": "x"}, set(ROLES), 422),
    ("POST", "/api/execute"): ("/api/execute", {"path": "nope"}, {"admin", "operator"}, 404),
    ("GET", "/api/executions"): ("/api/executions", None, READ, 200),
    # a bad cursor: the change stream never ends by itself, its 422 answers at once
    ("GET", "/api/executions/stream"): ("/api/executions/stream?after=x", None, READ, 422),
    ("GET", "/api/usage"): ("/api/usage", None, READ, 200),
    ("GET", "/api/executions/{execution_id}"): ("/api/executions/1", None, READ, 404),
    ("GET", "/api/executions/{execution_id}/status"): ("/api/executions/1/status", None, READ, 404),
    ("GET", "/api/executions/{execution_id}/logs"): ("/api/executions/1/logs", None, READ, 404),
    ("GET", "/api/executions/{execution_id}/diagnosis"): (
        "/api/executions/1/diagnosis",
        None,
        READ,
        404,
    ),
    ("GET", "/api/executions/{execution_id}/describe"): (
        "/api/executions/1/describe",
        None,
        READ,
        404,
    ),
    ("GET", "/api/executions/{execution_id}/results/{result_id}"): (
        "/api/executions/1/results/2",
        None,
        READ,
        404,
    ),
    ("GET", "/api/executions/{execution_id}/stream"): ("/api/executions/1/stream", None, READ, 404),
    ("GET", "/api/executions/{execution_id}/events"): ("/api/executions/1/events", None, READ, 404),
    ("POST", "/api/executions/{execution_id}/cancel"): (
        "/api/executions/1/cancel",
        {},
        {"admin", "operator"},
        404,
    ),
    ("POST", "/api/executions/{execution_id}/steps/{step}/retry"): (
        "/api/executions/1/steps/s/retry",
        {},
        {"admin", "operator"},
        404,
    ),
    ("POST", "/api/executions/{execution_id}/steps/{step}/skip"): (
        "/api/executions/1/steps/s/skip",
        {"result": 1},
        {"admin", "operator"},
        404,
    ),
    ("POST", "/api/executions/{execution_id}/restart"): (
        "/api/executions/1/restart",
        {},
        {"admin", "operator"},
        404,
    ),
    ("POST", "/api/executions/{execution_id}/rerun"): (
        "/api/executions/1/rerun",
        None,
        {"admin", "operator"},
        404,
    ),
    ("GET", "/api/executions/{execution_id}/restarts"): (
        "/api/executions/1/restarts",
        None,
        READ,
        404,
    ),
    # no type (an unknown one is a worker's informative event, DSL 12.3), no list of events
    ("POST", "/api/events"): ("/api/events", {"execution_id": 1}, POSTERS, 422),
    ("POST", "/api/events/batch"): ("/api/events/batch", {"events": "none"}, POSTERS, 422),
    ("GET", "/api/commands/{event_id}"): ("/api/commands/1", None, set(ROLES), 404),
    ("POST", "/api/commands/{event_id}/claim"): (
        "/api/commands/1/claim",
        {"worker_id": "w"},
        {"admin", "worker"},
        404,
    ),
    ("POST", "/api/commands/claim"): (
        "/api/commands/claim",
        {"worker_id": "w"},
        {"admin", "worker"},
        200,
    ),
    ("POST", "/api/commands/{event_id}/heartbeat"): (
        "/api/commands/1/heartbeat",
        {"worker_id": "w", "epoch": 1},
        {"admin", "worker"},
        404,
    ),
    ("POST", "/api/commands/{event_id}/release"): (
        "/api/commands/1/release",
        {"worker_id": "w", "epoch": 1},
        {"admin", "worker"},
        404,
    ),
    ("POST", "/api/credentials"): (
        "/api/credentials",
        {"name": "c", "type": "t", "data": {}},
        {"admin", "operator"},
        200,
    ),
    ("GET", "/api/credentials"): ("/api/credentials", None, set(ROLES), 200),
    ("GET", "/api/credentials/{name}"): ("/api/credentials/nope", None, set(ROLES), 404),
    ("DELETE", "/api/credentials/{name}"): (
        "/api/credentials/nope",
        None,
        {"admin", "operator"},
        404,
    ),
    ("POST", "/api/workers/machine-id"): (
        "/api/workers/machine-id",
        # a clean stop: every role may ask in turn (a check-in makes the name its token's)
        {"worker_id": "w", "release": True},
        {"admin", "worker"},
        200,
    ),
    ("GET", "/api/workers"): ("/api/workers", None, READ, 200),
    ("GET", "/api/approvals"): ("/api/approvals", None, READ, 200),
    ("GET", "/api/approvals/{approval_id}"): ("/api/approvals/1", None, READ, 404),
    ("POST", "/api/approvals/{approval_id}/decision"): (
        "/api/approvals/1/decision",
        {"decision": "approve"},
        {"admin", "approver"},
        404,
    ),
    ("GET", "/api/executions/{execution_id}/graph"): ("/api/executions/1/graph", None, READ, 404),
    ("GET", "/api/whoami"): ("/api/whoami", None, READ, 200),
    # the web UI (a redirect is not followed by the table tests)
    ("GET", "/"): ("/", None, OPEN, 307),
    ("GET", "/ui"): ("/ui", None, OPEN, 307),
    ("GET", "/ui/{path:path}"): ("/ui/assets/nope.js", None, OPEN, 404),
    ("WS", "/api/worker/channel"): ("/api/worker/channel", None, {"admin", "worker"}, 101),
}


def app_routes(api: Api) -> set[tuple[str, str]]:
    """(method, path template) of every route the app serves, HEAD aside."""
    found: set[tuple[str, str]] = set()
    for route in iter_route_contexts(api.client.app.routes):  # type: ignore[attr-defined]
        assert route.path is not None, route
        if isinstance(route.original_route, WebSocketRoute | APIWebSocketRoute):
            found.add(("WS", route.path))
            continue
        found |= {(method, route.path) for method in route.methods or () if method != "HEAD"}
    return found


def test_every_route_of_the_app_has_a_row_in_the_table(api: Api) -> None:
    assert app_routes(api) == set(ROUTES)


def _http_rows() -> list[tuple[str, str, Any, set[str] | None, int]]:
    return [
        (method, path, body, allowed, status)
        for (method, _), (path, body, allowed, status) in ROUTES.items()
        if method != "WS"
    ]


def test_health_is_open(api: Api) -> None:
    assert ok(api.get("/health", role=None)) == {"status": "ok"}


def test_every_route_but_the_open_ones_needs_a_token(api: Api) -> None:
    for method, path, body, allowed, status in _http_rows():
        response = api.call(method, path, role=None, json=body, follow_redirects=False)
        if allowed is OPEN:
            assert response.status_code == status, (method, path, response.text)
            continue
        error(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("header", ["Bearer nope", "Basic abc", "Bearer ", "token"])
def test_a_bad_or_unknown_token_is_401(api: Api, header: str) -> None:
    response = api.client.get("/api/executions", headers={"Authorization": header})
    error(response, 401, "unauthorized")


def test_each_role_gets_403_exactly_where_the_table_says(api: Api) -> None:
    for method, path, body, allowed, status in _http_rows():
        for role in ROLES:
            response = api.call(method, path, role=role, json=body, follow_redirects=False)
            if allowed is OPEN or role in allowed:
                assert response.status_code == status, (method, path, role, response.text)
            else:
                body_ = error(response, 403, "forbidden")
                assert body_["role"] == role and role in body_["message"], (method, path, role)


def test_the_worker_channel_opens_only_for_the_roles_of_the_table(api: Api) -> None:
    path, _, allowed, _ = ROUTES[("WS", "/api/worker/channel")]
    assert allowed is not None
    for role in (None, *ROLES):
        if role in allowed:
            with api.client.websocket_connect(path, headers=api.headers(role)) as ws:
                ws.send_text(json.dumps({"id": 1, "body": {"events": "none"}}))
                assert json.loads(ws.receive_text())["status"] == 422
            continue
        with (
            pytest.raises(WebSocketDisconnect) as refused,
            api.client.websocket_connect(path, headers=api.headers(role)),
        ):
            pass
        assert refused.value.code == 1008, role


def test_the_store_keeps_only_the_hash_of_a_token(api: Api) -> None:
    token = api.tokens["viewer"]
    row = api.store.get_token(auth.token_hash(token))
    assert row is not None and row.role == "viewer" and row.name == "test-viewer"
    assert token not in row.token_hash and api.store.get_token(token) is None


def test_create_token_refuses_an_unknown_role(api: Api) -> None:
    with pytest.raises(auth.InvalidRole):
        auth.create_token(api.store, "root", None, 1.0)
