"""Integration tests for the conformance mock API (milepost.conformance.mock_api).

One MockServer serves the whole module; tests that depend on shared state reset it first.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from milepost.conformance import mock_api
from milepost.conformance.mock_api import MockServer, MockState, create_app
from tests.shared import wait_for_async

REPO_ROOT = Path(__file__).resolve().parents[2]
INT_PARSING_MSG = "Input should be a valid integer, unable to parse string as an integer"


@pytest.fixture(scope="module")
def server() -> Iterator[MockServer]:
    with MockServer() as srv:
        yield srv


@pytest.fixture
def client(server: MockServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, trust_env=False, timeout=10.0) as c:
        yield c


def ids(items: list[dict[str, Any]]) -> list[int]:
    return [item["id"] for item in items]


# -- server plumbing ---------------------------------------------------------------------------


def test_server_url_and_health(server: MockServer, client: httpx.Client) -> None:
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", server.url)
    assert server.port == int(server.url.rsplit(":", 1)[1]) > 0
    response = client.get("/health")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"status": "ok"}


def test_each_app_has_fresh_state_and_stop_shuts_down() -> None:
    app_a, app_b = create_app(), create_app()
    assert app_a.state.mock is not app_b.state.mock
    with MockServer(app=app_a) as a, MockServer(app=app_b) as b:
        assert a.url != b.url
        with httpx.Client(trust_env=False, timeout=10.0) as c:
            first_a = c.get(f"{a.url}/api/v1/flaky", params={"page": 1, "fail_on": "1"})
            second_a = c.get(f"{a.url}/api/v1/flaky", params={"page": 1, "fail_on": "1"})
            first_b = c.get(f"{b.url}/api/v1/flaky", params={"page": 1, "fail_on": "1"})
        assert [first_a.status_code, second_a.status_code, first_b.status_code] == [500, 200, 500]
        url = a.url
    with pytest.raises(RuntimeError):
        _ = a.url
    with httpx.Client(trust_env=False, timeout=2.0) as c, pytest.raises(httpx.ConnectError):
        c.get(f"{url}/health")


# -- /api/v1/users -----------------------------------------------------------------------------


def test_users_default_page(client: httpx.Client) -> None:
    body = client.get("/api/v1/users").json()
    assert ids(body["users"]) == list(range(1, 11))
    assert body["users"][0] == {"id": 1, "username": "user1", "email": "user1@example.com"}
    assert (body["has_more"], body["offset"], body["limit"], body["total"]) == (True, 0, 10, 35)


def test_users_offset_30_is_last_page(client: httpx.Client) -> None:
    body = client.get("/api/v1/users", params={"offset": 30}).json()
    assert ids(body["users"]) == [31, 32, 33, 34, 35]
    assert body["users"][-1] == {"id": 35, "username": "user35", "email": "user35@example.com"}
    assert body["has_more"] is False
    assert (body["offset"], body["limit"], body["total"]) == (30, 10, 35)


@pytest.mark.parametrize(
    ("offset", "limit", "expected", "has_more"),
    [(5, 3, [6, 7, 8], True), (25, 10, list(range(26, 36)), False), (40, 10, [], False)],
)
def test_users_slicing(
    client: httpx.Client, offset: int, limit: int, expected: list[int], has_more: bool
) -> None:
    body = client.get("/api/v1/users", params={"offset": offset, "limit": limit}).json()
    assert ids(body["users"]) == expected
    assert body["has_more"] is has_more
    assert (body["offset"], body["limit"]) == (offset, limit)


# -- /api/v1/assessments -----------------------------------------------------------------------


def test_assessments_first_page_of_five(client: httpx.Client) -> None:
    body = client.get("/api/v1/assessments", params={"page": 1, "pageSize": 5}).json()
    assert ids(body["data"]) == [1, 2, 3, 4, 5]
    assert body["data"][0] == {"id": 1, "name": "Assessment 1", "score": 51}
    assert body["paging"] == {"hasMore": True, "page": 1, "pageSize": 5, "total": 35}


def test_assessments_page_four_is_last(client: httpx.Client) -> None:
    body = client.get("/api/v1/assessments", params={"page": 4}).json()
    assert ids(body["data"]) == [31, 32, 33, 34, 35]
    assert body["data"][-1] == {"id": 35, "name": "Assessment 35", "score": 85}
    assert body["paging"] == {"hasMore": False, "page": 4, "pageSize": 10, "total": 35}


def test_assessments_page_three_has_more(client: httpx.Client) -> None:
    body = client.get("/api/v1/assessments", params={"page": 3}).json()
    assert ids(body["data"]) == list(range(21, 31))
    assert body["paging"]["hasMore"] is True


# -- /api/v1/events ----------------------------------------------------------------------------


def test_events_cursor_walk(client: httpx.Client) -> None:
    seen: list[int] = []
    cursors: list[str | None] = []
    params: dict[str, str] = {}
    for _ in range(10):
        body = client.get("/api/v1/events", params=params).json()
        assert body["limit"] == 10
        seen.extend(ids(body["events"]))
        cursors.append(body["next_cursor"])
        if body["next_cursor"] is None:
            break
        params = {"cursor": body["next_cursor"]}
    assert cursors == ["Mg==", "Mw==", "NA==", None]
    assert seen == list(range(1, 36))


def test_events_cursor_pages(client: httpx.Client) -> None:
    page2 = client.get("/api/v1/events", params={"cursor": "Mg=="}).json()
    assert ids(page2["events"]) == list(range(11, 21))
    assert page2["next_cursor"] == "Mw=="
    last = client.get("/api/v1/events", params={"cursor": "NA=="}).json()
    assert ids(last["events"]) == [31, 32, 33, 34, 35]
    assert last["next_cursor"] is None


def test_event_item_shape(client: httpx.Client) -> None:
    events = {
        e["id"]: e for e in client.get("/api/v1/events", params={"limit": 35}).json()["events"]
    }
    assert events[1] == {
        "id": 1,
        "type": "user_action",
        "timestamp": "2024-01-02T12:00:00Z",
        "data": {"action": "event_1"},
    }
    assert events[27]["timestamp"] == "2024-01-28T12:00:00Z"
    assert events[28]["timestamp"] == "2024-01-01T12:00:00Z"


@pytest.mark.parametrize("cursor", ["", "not base64!", "YWJj", "%%%", "Mg"])
def test_events_bad_cursor_means_page_one(client: httpx.Client, cursor: str) -> None:
    body = client.get("/api/v1/events", params={"cursor": cursor}).json()
    assert ids(body["events"]) == list(range(1, 11))
    assert body["next_cursor"] == "Mg=="


def test_events_custom_limit(client: httpx.Client) -> None:
    body = client.get("/api/v1/events", params={"cursor": "Mw==", "limit": 15}).json()
    assert ids(body["events"]) == list(range(31, 36))
    assert body["next_cursor"] is None
    assert body["limit"] == 15


# -- /api/v1/flaky -----------------------------------------------------------------------------


def test_flaky_fails_a_page_once_then_succeeds(client: httpx.Client) -> None:
    assert client.post("/api/v1/flaky/reset").json() == {
        "status": "reset",
        "message": "Flaky endpoint counters cleared",
    }
    first = client.get("/api/v1/flaky", params={"page": 2, "fail_on": "2"})
    assert first.status_code == 500
    assert first.json() == {"detail": "Simulated failure"}

    retry = client.get("/api/v1/flaky", params={"page": 2, "fail_on": "2"})
    assert retry.status_code == 200
    body = retry.json()
    assert body["data"][0] == {"id": 11, "value": "item_11"}
    assert ids(body["data"]) == list(range(11, 21))
    assert body["paging"] == {"hasMore": True, "page": 2, "pageSize": 10}

    assert client.get("/api/v1/flaky", params={"page": 2, "fail_on": "2"}).status_code == 200


def test_flaky_reset_makes_page_fail_again(client: httpx.Client) -> None:
    client.post("/api/v1/flaky/reset")
    assert client.get("/api/v1/flaky", params={"page": 3, "fail_on": "3"}).status_code == 500
    assert client.get("/api/v1/flaky", params={"page": 3, "fail_on": "3"}).status_code == 200
    assert client.post("/api/v1/flaky/reset").status_code == 200
    assert client.get("/api/v1/flaky", params={"page": 3, "fail_on": "3"}).status_code == 500


def test_flaky_counters_are_shared_whatever_fail_on(client: httpx.Client) -> None:
    client.post("/api/v1/flaky/reset")
    assert client.get("/api/v1/flaky", params={"page": 4}).status_code == 200
    last = client.get("/api/v1/flaky", params={"page": 4, "fail_on": "1, ,4,"})
    assert last.status_code == 200  # page 4's counter is now 2, not 1
    assert ids(last.json()["data"]) == [31, 32, 33, 34, 35]
    assert last.json()["paging"] == {"hasMore": False, "page": 4, "pageSize": 10}
    # blank entries are ignored and other pages are counted separately
    assert client.get("/api/v1/flaky", params={"page": 1, "fail_on": "1, ,4,"}).status_code == 500


def test_flaky_bad_fail_on_is_plain_500_without_counting(client: httpx.Client) -> None:
    client.post("/api/v1/flaky/reset")
    bad = client.get("/api/v1/flaky", params={"page": 5, "fail_on": "5,x"})
    assert bad.status_code == 500
    assert bad.text == "Internal Server Error"
    assert bad.headers["content-type"].startswith("text/plain")
    # the bad request did not count as page 5's first attempt
    first = client.get("/api/v1/flaky", params={"page": 5, "fail_on": "5"})
    assert first.status_code == 500
    assert first.json() == {"detail": "Simulated failure"}


# -- /api/v1/errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error_type", "status", "body", "retry_after"),
    [
        ("429", 429, {"error": "Too Many Requests", "message": "Rate limit exceeded"}, "7"),
        (
            "503",
            503,
            {"error": "Service Unavailable", "message": "Server temporarily unavailable"},
            "7",
        ),
        ("500", 500, {"detail": "Internal Server Error - simulated"}, None),
        ("auth", 401, {"detail": "Unauthorized - invalid credentials"}, None),
        ("403", 403, {"detail": "Forbidden - insufficient permissions"}, None),
        ("404", 404, {"detail": "Not Found - resource does not exist"}, None),
    ],
)
def test_errors_simulated(
    client: httpx.Client,
    error_type: str,
    status: int,
    body: dict[str, str],
    retry_after: str | None,
) -> None:
    response = client.get("/api/v1/errors", params={"error_type": error_type, "retry_after": 7})
    assert response.status_code == status
    assert response.json() == body
    assert response.headers.get("retry-after") == retry_after
    assert "www-authenticate" not in response.headers


@pytest.mark.parametrize("error_type", ["429", "503"])
def test_errors_retry_after_defaults_to_5(client: httpx.Client, error_type: str) -> None:
    response = client.get("/api/v1/errors", params={"error_type": error_type})
    assert response.headers["retry-after"] == "5"


@pytest.mark.parametrize("params", [{}, {"error_type": "teapot"}, {"error_type": ""}])
def test_errors_default_is_a_flaky_style_page(client: httpx.Client, params: dict[str, str]) -> None:
    response = client.get("/api/v1/errors", params={**params, "page": 3})
    assert response.status_code == 200
    body = response.json()
    assert ids(body["data"]) == list(range(21, 31))
    assert body["data"][0] == {"id": 21, "value": "item_21"}
    assert body["paging"] == {"hasMore": True, "page": 3, "pageSize": 10}


def test_errors_timeout_hangs_without_blocking_others() -> None:
    """The 30 s `timeout` type: the client times out while other requests still get served."""

    async def scenario(url: str) -> tuple[BaseException | None, float, int]:
        async with httpx.AsyncClient(base_url=url, trust_env=False) as c:
            hanging = asyncio.create_task(
                c.get("/api/v1/errors", params={"error_type": "timeout"}, timeout=1.5)
            )
            began = time.monotonic()
            health = await c.get("/health", timeout=5.0)
            health_elapsed = time.monotonic() - began
            assert not hanging.done()
            try:
                await hanging
            except httpx.TimeoutException as exc:
                return exc, health_elapsed, health.status_code
            return None, health_elapsed, health.status_code

    with MockServer(shutdown_timeout=0.5) as srv:
        error, health_elapsed, health_status = asyncio.run(scenario(srv.url))
        began = time.monotonic()
    stop_elapsed = time.monotonic() - began
    assert isinstance(error, httpx.ReadTimeout)
    assert health_status == 200
    assert health_elapsed < 1.0
    assert stop_elapsed < 5.0  # stop() does not wait for the 30 s sleep


def test_errors_timeout_body_after_the_wait() -> None:
    with (
        MockServer(app=create_app(error_timeout_seconds=0.3)) as srv,
        httpx.Client(base_url=srv.url, trust_env=False, timeout=10.0) as c,
    ):
        began = time.monotonic()
        response = c.get("/api/v1/errors", params={"error_type": "timeout"})
        elapsed = time.monotonic() - began
    assert response.status_code == 200
    assert response.json() == {"data": [], "simulated": "timeout"}
    assert elapsed >= 0.3


# -- /api/v1/rate-limited ----------------------------------------------------------------------


def test_rate_limited_rejects_second_quick_request(client: httpx.Client) -> None:
    first = client.get("/api/v1/rate-limited", params={"requests_per_second": 1})
    second = client.get("/api/v1/rate-limited", params={"requests_per_second": 1})
    assert first.status_code == 200
    body = first.json()
    assert body["rate_limit"] == {"requests_in_window": 1, "limit": 1}
    assert body["data"][0] == {"id": 1, "value": "item_1", "rate_limited": True}
    assert ids(body["data"]) == list(range(1, 11))
    assert body["paging"] == {"hasMore": True, "page": 1, "pageSize": 10}

    assert second.status_code == 429
    assert second.headers["retry-after"] == "1"
    assert second.json() == {"error": "Rate limit exceeded", "requests_in_window": 1, "limit": 1}

    # one window for every caller: a looser limit still sees the accepted request
    third = client.get("/api/v1/rate-limited", params={"page": 2, "requests_per_second": 5})
    assert third.status_code == 200
    assert third.json()["rate_limit"] == {"requests_in_window": 2, "limit": 5}
    assert ids(third.json()["data"]) == list(range(11, 21))


def test_rate_limit_window_slides_after_one_second() -> None:
    now = [100.0]
    state = MockState(clock=lambda: now[0])
    assert state.rate_limit_admit(1) == (True, 1, 0)
    now[0] = 100.25
    assert state.rate_limit_admit(1) == (False, 1, 1)  # rejected requests are not recorded
    now[0] = 100.5
    assert state.rate_limit_admit(2) == (True, 2, 0)
    now[0] = 101.1  # the entry at 100.0 is older than a second now; 100.5 is not
    assert state.rate_limit_admit(1) == (False, 1, 1)
    assert state.rate_limit_admit(2) == (True, 2, 0)
    now[0] = 102.2
    assert state.rate_limit_admit(1) == (True, 1, 0)


# -- query validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "page"), [("1.0", 1), ("2.00", 2), ("+3", 3), ("003", 3), ("-0.0", 0)]
)
def test_integer_params_accept_zero_fractions(client: httpx.Client, raw: str, page: int) -> None:
    response = client.get("/api/v1/assessments", params={"page": raw})
    assert response.status_code == 200
    assert response.json()["paging"]["page"] == page
    assert type(response.json()["paging"]["page"]) is int


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/api/v1/assessments", "page"),
        ("/api/v1/assessments", "pageSize"),
        ("/api/v1/users", "offset"),
        ("/api/v1/users", "limit"),
        ("/api/v1/events", "limit"),
        ("/api/v1/flaky", "page"),
        ("/api/v1/errors", "retry_after"),
        ("/api/v1/rate-limited", "requests_per_second"),
    ],
)
@pytest.mark.parametrize("raw", ["1.5", "abc", "", "1e3", " 1", "1_0", "1.", "0x10"])
def test_integer_params_reject_non_integers(
    client: httpx.Client, path: str, name: str, raw: str
) -> None:
    response = client.get(path, params={name: raw})
    assert response.status_code == 422
    assert response.json() == {
        "detail": [
            {"type": "int_parsing", "loc": ["query", name], "msg": INT_PARSING_MSG, "input": raw}
        ]
    }


@pytest.mark.parametrize(
    ("raw", "error_type"),
    [
        ("301", "less_than_equal"),
        ("300.5", "less_than_equal"),
        ("-0.1", "greater_than_equal"),
        ("nan", "less_than_equal"),
        ("soon", "float_parsing"),
    ],
)
def test_probe_delay_bounds(client: httpx.Client, raw: str, error_type: str) -> None:
    client.post("/api/v1/concurrency/reset")
    response = client.get("/api/v1/concurrency/probe", params={"delay_seconds": raw})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["type"] == error_type
    assert error["loc"] == ["query", "delay_seconds"]
    assert error["input"] == raw
    assert client.get("/api/v1/concurrency/stats").json()["started"] == 0


@pytest.mark.parametrize(
    ("method", "path", "status", "detail"),
    [
        ("GET", "/nope", 404, "Not Found"),
        ("GET", "/api/v1/unknown", 404, "Not Found"),
        ("GET", "/API/v1/users", 404, "Not Found"),
        ("GET", "/api/v1/users/", 404, "Not Found"),
        ("GET", "/users", 404, "Not Found"),
        ("POST", "/api/v1/users", 405, "Method Not Allowed"),
        ("DELETE", "/api/v1/assessments", 405, "Method Not Allowed"),
        ("GET", "/api/v1/flaky/reset", 405, "Method Not Allowed"),
        ("GET", "/api/v1/concurrency/reset", 405, "Method Not Allowed"),
        ("POST", "/api/v1/concurrency/stats", 405, "Method Not Allowed"),
        ("POST", "/health", 405, "Method Not Allowed"),
    ],
)
def test_unknown_path_and_wrong_method(
    client: httpx.Client, method: str, path: str, status: int, detail: str
) -> None:
    response = client.request(method, path)
    assert response.status_code == status
    assert response.json() == {"detail": detail}


# -- concurrency probe -------------------------------------------------------------------------


def test_probe_single_request(client: httpx.Client) -> None:
    assert client.post("/api/v1/concurrency/reset").json() == {"status": "reset"}
    body = client.get("/api/v1/concurrency/probe", params={"label": "solo"}).json()
    duration = body.pop("duration_seconds")
    assert body == {
        "request_id": 1,
        "label": "solo",
        "delay_seconds": 0.0,
        "active_at_start": 1,
        "started": 1,
        "completed": 1,
        "active": 0,
        "max_active": 1,
    }
    assert 0 <= duration < 1.0
    assert duration == round(duration, 4)

    stats = client.get("/api/v1/concurrency/stats").json()
    assert [e["phase"] for e in stats["recent_events"]] == ["start", "end"]
    start, end = stats["recent_events"]
    assert set(start) == {"phase", "request_id", "label", "delay_seconds", "ts", "active"}
    assert set(end) == {"phase", "request_id", "label", "duration_seconds", "ts", "active"}
    assert (start["request_id"], start["label"], start["active"]) == (1, "solo", 1)
    assert (end["request_id"], end["active"], end["duration_seconds"]) == (1, 0, duration)
    assert abs(start["ts"] - time.time()) < 60
    assert end["ts"] >= start["ts"]

    default = client.get("/api/v1/concurrency/probe").json()
    assert (default["label"], default["request_id"], default["started"]) == ("probe", 2, 2)


def test_probe_runs_requests_concurrently(server: MockServer) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=30.0) as c:
            assert (await c.post("/api/v1/concurrency/reset")).status_code == 200

            async def probe(delay: float, label: str) -> dict[str, Any]:
                response = await c.get(
                    "/api/v1/concurrency/probe", params={"delay_seconds": delay, "label": label}
                )
                assert response.status_code == 200
                body: dict[str, Any] = response.json()
                return body

            async def instant_probes_once_slow_started() -> list[dict[str, Any]]:
                async def slow_started() -> bool:
                    stats = (await c.get("/api/v1/concurrency/stats")).json()
                    return bool(stats["started"] >= 1)

                await wait_for_async(slow_started, "the slow probe to start")
                return list(await asyncio.gather(*(probe(0, f"fast-{i}") for i in range(4))))

            slow, fast = await asyncio.gather(
                probe(1.0, "slow"), instant_probes_once_slow_started()
            )
            stats = (await c.get("/api/v1/concurrency/stats")).json()
            return [slow, *fast], stats

    results, stats = asyncio.run(scenario())
    slow, *fast = results
    assert (slow["request_id"], slow["active_at_start"], slow["delay_seconds"]) == (1, 1, 1.0)
    assert slow["duration_seconds"] >= 1.0
    assert slow["started"] == 5 and slow["completed"] == 5 and slow["active"] == 0
    assert sorted(r["request_id"] for r in fast) == [2, 3, 4, 5]
    assert all(r["active_at_start"] >= 2 for r in fast)

    assert (stats["started"], stats["completed"], stats["active"]) == (5, 5, 0)
    assert 2 <= stats["max_active"] <= 5
    events = stats["recent_events"]
    assert len(events) == 10
    assert sorted(e["phase"] for e in events) == ["end"] * 5 + ["start"] * 5
    assert events[0]["phase"] == "start" and events[0]["label"] == "slow"
    assert events[-1]["phase"] == "end" and events[-1]["request_id"] == 1
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    for request_id in range(1, 6):
        phases = [e["phase"] for e in events if e["request_id"] == request_id]
        assert phases == ["start", "end"]


def test_probe_event_log_keeps_newest_200(client: httpx.Client) -> None:
    client.post("/api/v1/concurrency/reset")
    for i in range(101):
        assert client.get("/api/v1/concurrency/probe", params={"label": f"p{i}"}).status_code == 200
    stats = client.get("/api/v1/concurrency/stats").json()
    assert (stats["started"], stats["completed"], stats["max_active"]) == (101, 101, 1)
    events = stats["recent_events"]
    assert len(events) == 200
    assert (events[0]["phase"], events[0]["request_id"]) == ("start", 2)
    assert (events[-1]["phase"], events[-1]["request_id"]) == ("end", 101)

    client.post("/api/v1/concurrency/reset")
    assert client.get("/api/v1/concurrency/stats").json() == {
        "started": 0,
        "completed": 0,
        "active": 0,
        "max_active": 0,
        "recent_events": [],
    }


# -- command line ------------------------------------------------------------------------------


def test_main_defaults_and_port_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def fake_run(app: Any, **kwargs: Any) -> None:
        calls.append({"app": app, **kwargs})

    monkeypatch.setattr(uvicorn, "run", fake_run)
    mock_api.main([])
    mock_api.main(["6001"])
    assert [(c["host"], c["port"], c["log_level"]) for c in calls] == [
        ("0.0.0.0", 5555, "warning"),
        ("0.0.0.0", 6001, "warning"),
    ]
    assert calls[0]["app"] is not calls[1]["app"]
    with pytest.raises(SystemExit):
        mock_api.main(["not-a-port"])
    with pytest.raises(SystemExit):
        mock_api.main(["70000"])
    assert len(calls) == 2


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_module_runs_as_a_script() -> None:
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "milepost.conformance.mock_api", str(port)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # connection retries (with httpcore's backoff) cover the interpreter start-up
        transport = httpx.HTTPTransport(retries=8)
        with httpx.Client(transport=transport, trust_env=False, timeout=10.0) as c:
            response = c.get(f"http://127.0.0.1:{port}/health")
            users = c.get(f"http://127.0.0.1:{port}/api/v1/users", params={"offset": 30})
        assert response.json() == {"status": "ok"}
        assert ids(users.json()["users"]) == [31, 32, 33, 34, 35]
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=20)
    assert f"listening on http://0.0.0.0:{port}" in stderr
