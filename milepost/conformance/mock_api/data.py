"""The data sets of the mock API and how its endpoints page through them (offsets, pages,
cursors), with the sizes the specification fixes."""

from __future__ import annotations

import base64
import binascii
from typing import Any

TOTAL_ITEMS = 35
DEFAULT_PAGE_SIZE = 10
DEFAULT_MAX_EVENTS = 200
ERROR_TIMEOUT_SECONDS = 30.0
MAX_PROBE_DELAY_SECONDS = 300.0


def _ids() -> range:
    return range(1, TOTAL_ITEMS + 1)


def users() -> list[dict[str, Any]]:
    return [{"id": i, "username": f"user{i}", "email": f"user{i}@example.com"} for i in _ids()]


def assessments() -> list[dict[str, Any]]:
    return [{"id": i, "name": f"Assessment {i}", "score": 50 + (i % 50)} for i in _ids()]


def events() -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "type": "user_action",
            "timestamp": f"2024-01-{(i % 28) + 1:02d}T12:00:00Z",
            "data": {"action": f"event_{i}"},
        }
        for i in _ids()
    ]


def plain_items() -> list[dict[str, Any]]:
    return [{"id": i, "value": f"item_{i}"} for i in _ids()]


def rate_limited_items() -> list[dict[str, Any]]:
    return [{"id": i, "value": f"item_{i}", "rate_limited": True} for i in _ids()]


def items_at(items: list[dict[str, Any]], start: int, count: int) -> list[dict[str, Any]]:
    """Items at positions ``start .. start+count-1`` (Python slice semantics)."""
    return items[start : start + count]


def simple_page(items: list[dict[str, Any]], page: int) -> dict[str, Any]:
    """The ``/flaky``-style page body: page ``page`` of size 10, no ``total`` field."""
    start = (page - 1) * DEFAULT_PAGE_SIZE
    return {
        "data": items_at(items, start, DEFAULT_PAGE_SIZE),
        "paging": {
            "hasMore": page * DEFAULT_PAGE_SIZE < TOTAL_ITEMS,
            "page": page,
            "pageSize": DEFAULT_PAGE_SIZE,
        },
    }


def encode_cursor(page: int) -> str:
    """Cursor for ``page``: padded standard base64 of the decimal page number."""
    return base64.b64encode(str(page).encode("ascii")).decode("ascii")


def decode_cursor(cursor: str | None) -> int:
    """Page number of ``cursor``; missing, empty or undecodable cursors mean page 1."""
    if not cursor:
        return 1
    try:
        return int(base64.b64decode(cursor).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return 1
