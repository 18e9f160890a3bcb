"""The `playbook` tool (DSL 3.5): run a registered playbook as a child execution and wait.

The tool itself only shapes the call and the result; starting and waiting is done by a
`ChildRunner` that the host provides: the embedded engine runs the child in-process, the
HTTP worker asks the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from milepost.core import cancellation
from milepost.playbook.durations import parse_duration
from milepost.tools import base

DEFAULT_TIMEOUT = 300.0


@dataclass(frozen=True, slots=True)
class ChildRun:
    """What a finished (or abandoned) child execution looks like to its parent."""

    execution_id: str
    status: str
    error: dict[str, Any] | None = None
    results: dict[str, Any] = field(default_factory=dict)
    """step -> latest result, for the steps that completed."""
    completed: tuple[str, ...] = ()
    """Completed steps in completion order."""


@dataclass(frozen=True, slots=True)
class Parent:
    """The command that starts a child: a worker's token may start, watch and cancel only
    the children of a command it holds, and shows this claim to prove it."""

    execution_id: str
    command_id: int
    epoch: int


class ChildRunner(Protocol):
    async def run_child(
        self, path: str, workload: dict[str, Any], *, parent: Parent, timeout: float
    ) -> ChildRun: ...


class PlaybookTool:
    def __init__(self, runner: ChildRunner | None) -> None:
        self.runner = runner

    async def run(self, call: base.ToolCall) -> base.ToolResult:
        """The child's outcome; `ToolRuntime.run` times every call, this one included."""
        path = call.config.get("path")
        if not isinstance(path, str) or not path:
            return base.failure("invalid", "playbook tool needs `path` (a catalog path)")
        if self.runner is None:
            return base.failure("invalid", "this worker cannot start child playbooks")
        try:
            timeout = _timeout(call)
        except ValueError as exc:  # a rendered timeout that is not a duration
            return base.failure("invalid", str(exc))
        try:
            parent = Parent(call.execution_id, call.command_id, call.epoch)
            child = await self.runner.run_child(
                path, dict(call.input), parent=parent, timeout=timeout
            )
        except TimeoutError:
            return base.failure(
                "timeout",
                f"child playbook {path!r} did not finish within {timeout:g}s",
                retryable=True,
            )
        except ConnectionError as exc:  # the host could not reach the server to start it
            return base.failure("connection", f"child playbook {path!r}: {exc}", retryable=True)
        except Exception as exc:  # the host could not start it: unknown path, invalid playbook
            return base.failure("playbook", f"child playbook {path!r}: {exc}")
        summary = {"execution_id": child.execution_id, "status": child.status}
        if child.status != "COMPLETED":
            reason = (child.error or {}).get("reason") or (child.error or {}).get("message") or ""
            message = f"child playbook {path!r} ({child.execution_id}) {child.status}"
            # the code lets the parent's decision tell a cancel that reached the child
            # through the parent from the child's own failure
            code = cancellation.CHILD_CANCELLED if child.status == "CANCELLED" else None
            return base.ToolResult(
                data=summary,
                error=base.ToolFailure(
                    "playbook", f"{message}: {reason}" if reason else message, code=code
                ),
            )
        return _shape(call.config, child, summary)


def _timeout(call: base.ToolCall) -> float:
    raw = call.config.get("timeout")
    # a duration as everywhere (`300`, `5m`); a literal one was checked at load, and one
    # that rendered wrong fails the call instead of silently waiting the default
    value = DEFAULT_TIMEOUT if raw is None else parse_duration(raw, "playbook `timeout`")
    return min(value, call.timeout) if call.timeout else value


def _shape(config: dict[str, Any], child: ChildRun, summary: dict[str, Any]) -> base.ToolResult:
    """DSL 3.5: `return_step`, else `return_result`, else `{execution_id, status}`."""
    step = config.get("return_step")
    if step:
        if step not in child.results:
            return base.ToolResult(
                data=summary,
                error=base.ToolFailure(
                    "playbook", f"child playbook step {step!r} did not complete"
                ),
            )
        return base.ToolResult(data=child.results[step])
    if config.get("return_result") in (True, "true", "True"):
        chosen = config.get("result_step") or (child.completed[-1] if child.completed else None)
        return base.ToolResult(data=child.results.get(chosen) if chosen else None)
    return base.ToolResult(data=summary)
