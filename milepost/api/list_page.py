"""The runs list's page (`GET /api/executions`): its keyset cursor and each row's progress.

The cursor is the last row's `(created_at, execution_id)` as `<created_at>:<id>`: the
next page is the rows below it in the list's order, one index range however deep the page
(an `offset` makes the database walk every row before it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from milepost.api import errors, schemas, views
from milepost.core import state as st
from milepost.engine.lifecycle import ExecutionRow, Lifecycle
from milepost.engine.lifecycle import Keyset as Keyset  # the routes' name for it
from milepost.errors import MilepostError

CURSOR_PATTERN = r"^[0-9eE.+-]+:[0-9]+$"
"""The form of a keyset in a query, for its schema: `<time>:<id>`."""


def parse_cursor(
    value: str | None,
    loc: tuple[str, str] = ("query", "cursor"),
    what: str = "the `next` of a list page",
) -> Keyset | None:
    """A keyset `<time>:<id>` as written by `keyset`; a 422 naming `loc` when it is none."""
    if value is None or not value.strip():
        return None
    try:
        at_text, _, xid = value.strip().partition(":")
        at, execution_id = float(at_text), int(xid)
        if at != at or abs(at) == float("inf") or execution_id < 0:  # NaN orders nowhere
            raise ValueError
    except ValueError:
        raise errors.invalid([{"loc": list(loc), "msg": f"not a cursor: {what}"}]) from None
    return at, execution_id


def keyset(at: float, execution_id: int) -> str:
    return f"{at!r}:{execution_id}"  # repr: the float reads back exactly


def next_cursor(rows: Sequence[ExecutionRow], limit: int) -> str | None:
    if len(rows) < limit or not rows:
        return None
    return keyset(rows[-1].created_at, rows[-1].execution_id)


def items(
    engine: Lifecycle,
    rows: Sequence[ExecutionRow],
    waits: Callable[[int], list[dict[str, Any]]] | None = None,
) -> list[schemas.ExecutionItem]:
    """The rows with their progress: steps exited (one grouped read for the page) of their
    playbook's steps (parsed once per version, cached), and what a running one waits on
    first (`core.waiting`: `waits(execution_id)`, by default read as its status reads it)."""
    done = engine.steps_exited([r.execution_id for r in rows]) if rows else {}
    read = waits or (lambda xid: engine.read(xid, engine.waits_of))
    out = []
    for row in rows:
        item = views.execution_item(row)
        item.steps_done = done.get(row.execution_id, 0)
        item.steps_total = _steps(engine, row)
        if row.status not in st.TERMINAL:
            item.waiting = _first(read, row.execution_id)
        out.append(item)
    return out


def _first(
    read: Callable[[int], list[dict[str, Any]]], execution_id: int
) -> schemas.WaitOut | None:
    try:
        found = read(execution_id)
    except MilepostError:  # a catalog entry that no longer parses: no wait, still a row
        return None
    return schemas.WaitOut(**found[0]) if found else None


def _steps(engine: Lifecycle, row: ExecutionRow) -> int | None:
    if row.version is None:
        return None
    try:
        return len(engine.playbook(row.path, row.version).steps)
    except MilepostError:  # a catalog entry that no longer parses: no total, still a row
        return None
