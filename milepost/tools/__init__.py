"""Tool executors (DSL 3): python, http, shell, duckdb, noop.

`ToolRuntime` is imported lazily so that the python worker processes, which import
`milepost.tools.python_worker`, do not pay for httpx and duckdb.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from milepost.tools.base import ToolCall, ToolFailure, ToolResult

if TYPE_CHECKING:
    from milepost.tools.runtime import ToolRuntime

__all__ = ["ToolCall", "ToolFailure", "ToolResult", "ToolRuntime"]


def __getattr__(name: str) -> Any:
    if name == "ToolRuntime":
        from milepost.tools.runtime import ToolRuntime

        return ToolRuntime
    raise AttributeError(f"module 'milepost.tools' has no attribute {name!r}")
