"""The routes of the mock API, each answering as ``MOCK_API.md`` specifies, including its
strict reading of integer query parameters."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Annotated, Any

import fastapi
from fastapi import Query
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from milepost.conformance.mock_api import data
from milepost.conformance.mock_api.data import (
    DEFAULT_MAX_EVENTS,
    DEFAULT_PAGE_SIZE,
    ERROR_TIMEOUT_SECONDS,
    MAX_PROBE_DELAY_SECONDS,
    TOTAL_ITEMS,
)
from milepost.conformance.mock_api.state import MockState

# Decimal digits with an optional sign, optionally followed by a fraction made only of zeros.
_INT_PATTERN = re.compile(r"[+-]?[0-9]+(?:\.0+)?", re.ASCII)
_INT_PARSING_MSG = "Input should be a valid integer, unable to parse string as an integer"


def _parse_query_int(value: Any) -> Any:
    """Parse an integer query value strictly (``1``, ``-3``, ``+2``, ``1.0``; not ``1.5``)."""
    if not isinstance(value, str):
        return value
    if _INT_PATTERN.fullmatch(value) is None:
        raise PydanticCustomError("int_parsing", _INT_PARSING_MSG)
    try:
        return int(value.partition(".")[0])
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        raise PydanticCustomError("int_parsing", _INT_PARSING_MSG) from None


QueryInt = Annotated[int, Query(), BeforeValidator(_parse_query_int)]
"""An integer query parameter validated as the specification describes."""

ProbeDelay = Annotated[float, Query(ge=0, le=MAX_PROBE_DELAY_SECONDS)]


def _internal_server_error() -> PlainTextResponse:
    """What an unexpected server fault looks like (Starlette's default 500)."""
    return PlainTextResponse("Internal Server Error", status_code=500)


def create_app(
    *,
    max_events: int = DEFAULT_MAX_EVENTS,
    error_timeout_seconds: float = ERROR_TIMEOUT_SECONDS,
) -> fastapi.FastAPI:
    """Build a fresh mock API application with fresh state (``app.state.mock``).

    ``max_events`` bounds the concurrency probe's event log; ``error_timeout_seconds`` is how
    long ``/api/v1/errors?error_type=timeout`` waits (30 s per the specification).
    """
    state = MockState(max_events=max_events)
    # redirect_slashes=False: "/api/v1/users/" is an unknown path (404), not a redirect.
    app = fastapi.FastAPI(
        title="milepost conformance mock API", version="1.0", redirect_slashes=False
    )
    app.state.mock = state

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/api/v1/users")
    async def users(offset: QueryInt = 0, limit: QueryInt = DEFAULT_PAGE_SIZE) -> dict[str, Any]:
        return {
            "users": data.items_at(data.users(), offset, limit),
            "has_more": offset + limit < TOTAL_ITEMS,
            "offset": offset,
            "limit": limit,
            "total": TOTAL_ITEMS,
        }

    @app.get("/api/v1/assessments")
    async def assessments(
        page: QueryInt = 1,
        pageSize: QueryInt = DEFAULT_PAGE_SIZE,  # the wire name is camelCase
    ) -> dict[str, Any]:
        start = (page - 1) * pageSize
        return {
            "data": data.items_at(data.assessments(), start, pageSize),
            "paging": {
                "hasMore": start + pageSize < TOTAL_ITEMS,
                "page": page,
                "pageSize": pageSize,
                "total": TOTAL_ITEMS,
            },
        }

    @app.get("/api/v1/events")
    async def events(
        cursor: Annotated[str | None, Query()] = None,
        limit: QueryInt = DEFAULT_PAGE_SIZE,
    ) -> dict[str, Any]:
        page = data.decode_cursor(cursor)
        start = (page - 1) * limit
        end = start + limit
        return {
            "events": data.items_at(data.events(), start, limit),
            "next_cursor": data.encode_cursor(page + 1) if end < TOTAL_ITEMS else None,
            "limit": limit,
        }

    @app.get("/api/v1/flaky", response_model=None)
    async def flaky(
        page: QueryInt = 1,
        fail_on: Annotated[str, Query()] = "",
    ) -> dict[str, Any] | fastapi.Response:
        fail_pages: set[int] = set()
        for entry in fail_on.split(","):
            if not entry.strip():
                continue
            try:
                fail_pages.add(int(entry))
            except ValueError:
                return _internal_server_error()
        attempts = state.flaky_attempt(page)
        if page in fail_pages and attempts == 1:
            return JSONResponse({"detail": "Simulated failure"}, status_code=500)
        return data.simple_page(data.plain_items(), page)

    @app.post("/api/v1/flaky/reset")
    async def flaky_reset() -> dict[str, str]:
        state.flaky_reset()
        return {"status": "reset", "message": "Flaky endpoint counters cleared"}

    @app.get("/api/v1/errors", response_model=None)
    async def errors(
        page: QueryInt = 1,
        error_type: Annotated[str | None, Query()] = None,
        retry_after: QueryInt = 5,
    ) -> dict[str, Any] | fastapi.Response:
        if error_type == "429":
            return JSONResponse(
                {"error": "Too Many Requests", "message": "Rate limit exceeded"},
                status_code=429,
                headers={"Retry-After": str(retry_after)},
            )
        if error_type == "500":
            return JSONResponse({"detail": "Internal Server Error - simulated"}, status_code=500)
        if error_type == "503":
            return JSONResponse(
                {"error": "Service Unavailable", "message": "Server temporarily unavailable"},
                status_code=503,
                headers={"Retry-After": str(retry_after)},
            )
        if error_type == "timeout":
            await asyncio.sleep(error_timeout_seconds)
            return {"data": [], "simulated": "timeout"}
        if error_type == "auth":
            return JSONResponse({"detail": "Unauthorized - invalid credentials"}, status_code=401)
        if error_type == "403":
            return JSONResponse({"detail": "Forbidden - insufficient permissions"}, status_code=403)
        if error_type == "404":
            return JSONResponse({"detail": "Not Found - resource does not exist"}, status_code=404)
        return data.simple_page(data.plain_items(), page)

    @app.get("/api/v1/rate-limited", response_model=None)
    async def rate_limited(
        page: QueryInt = 1,
        requests_per_second: QueryInt = 2,
    ) -> dict[str, Any] | fastapi.Response:
        accepted, in_window, retry_after = state.rate_limit_admit(requests_per_second)
        if not accepted:
            return JSONResponse(
                {
                    "error": "Rate limit exceeded",
                    "requests_in_window": in_window,
                    "limit": requests_per_second,
                },
                status_code=429,
                headers={"Retry-After": str(retry_after)},
            )
        body = data.simple_page(data.rate_limited_items(), page)
        body["rate_limit"] = {"requests_in_window": in_window, "limit": requests_per_second}
        return body

    @app.get("/api/v1/concurrency/probe")
    async def concurrency_probe(
        delay_seconds: ProbeDelay = 0.0,
        label: Annotated[str, Query()] = "probe",
    ) -> dict[str, Any]:
        request_id, active_at_start = state.probe_start(label, delay_seconds)
        began = time.perf_counter()
        try:
            # the loop's timers may fire a little early (uvloop rounds to the millisecond):
            # the probe promises at least the delay, measured on the clock it reports
            while (left := delay_seconds - (time.perf_counter() - began)) > 0:
                await asyncio.sleep(left)
        except BaseException:
            state.probe_abort()
            raise
        duration = round(time.perf_counter() - began, 4)
        counters = state.probe_end(request_id, label, duration)
        return {
            "request_id": request_id,
            "label": label,
            "delay_seconds": delay_seconds,
            "duration_seconds": duration,
            "active_at_start": active_at_start,
            **counters,
        }

    @app.get("/api/v1/concurrency/stats")
    async def concurrency_stats() -> dict[str, Any]:
        return state.concurrency_stats()

    @app.post("/api/v1/concurrency/reset")
    async def concurrency_reset() -> dict[str, str]:
        state.concurrency_reset()
        return {"status": "reset"}

    return app
