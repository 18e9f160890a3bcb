"""W3C trace context (`traceparent`) of executions and attempts, derived from their ids.

A run is one trace: its trace id is a stable hash of the execution id (a child run's: its
parent's trace, named by the `traceparent` its `execution.started` carries, whose parent
span is the attempt of the parent's command that started it), and the run's own span id
another, so the engine can emit the run's span when the run ends (its start read
from the log) and every attempt started before can already name it as its parent. A
command carries `00-<trace>-<run span>-01`: the worker's attempt span is its child, with
the span id of the attempt (the command id, unique per attempt), and the report carries
the attempt's own traceparent back. Pure: nothing here reads a clock or draws a number.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from milepost.core.state import ExecutionState

VERSION = "00"
SAMPLED = "01"
_SHAPE = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_SPAN_MASK = (1 << 64) - 1


@functools.lru_cache(maxsize=4096)
def trace_id(execution_id: int) -> int:
    """The 16-byte trace id of an execution (never 0, which W3C forbids)."""
    digest = hashlib.blake2b(
        execution_id.to_bytes(16, "big", signed=True), digest_size=16, person=b"milepost.trace"
    ).digest()
    return int.from_bytes(digest, "big") or 1


@functools.lru_cache(maxsize=4096)
def run_span_id(execution_id: int) -> int:
    """The 8-byte span id of an execution's run span."""
    digest = hashlib.blake2b(
        execution_id.to_bytes(16, "big", signed=True), digest_size=8, person=b"milepost.run"
    ).digest()
    return int.from_bytes(digest, "big") or 1


def attempt_span_id(command_id: int) -> int:
    """The 8-byte span id of one attempt: its command id (an id per attempt)."""
    return (command_id & _SPAN_MASK) or 1


def format_traceparent(trace: int, span: int) -> str:
    return f"{VERSION}-{trace:032x}-{span:016x}-{SAMPLED}"


def run_trace(execution_id: int, traceparent: object = None) -> int:
    """The trace of a run: the one its `traceparent` names (a child's: its parent's trace),
    else the hash of its execution id."""
    parent = parse(traceparent)
    return parent[0] if parent is not None else trace_id(execution_id)


def child_fields(parent: ExecutionState | None, parent_command_id: int) -> dict[str, Any]:
    """What a child run's `execution.started` carries: the command of its parent that
    started it, and (the parent's state known) the parent's trace, with that command's
    attempt as the parent span."""
    fields: dict[str, Any] = {"parent_command_id": parent_command_id}
    if parent is not None:
        fields["traceparent"] = format_traceparent(
            run_trace(parent.execution_id, parent.traceparent), attempt_span_id(parent_command_id)
        )
    return fields


def command_traceparent(execution_id: int, traceparent: object = None) -> str:
    """What a command carries: its run's trace, with the run span as the parent
    (`traceparent`: the run's own, a child's)."""
    if traceparent is None:  # most runs: their own trace, the same for every command
        return _own_traceparent(execution_id)
    return format_traceparent(run_trace(execution_id, traceparent), run_span_id(execution_id))


@functools.lru_cache(maxsize=4096)
def _own_traceparent(execution_id: int) -> str:
    return format_traceparent(trace_id(execution_id), run_span_id(execution_id))


def attempt_traceparent(execution_id: int, command_id: int, traceparent: object = None) -> str:
    """The attempt's own context, which its report carries back (`traceparent`: its
    command's, whose trace it is in)."""
    head = _trace_head(execution_id, traceparent if isinstance(traceparent, str) else None)
    return f"{head}{attempt_span_id(command_id):016x}-{SAMPLED}"


@functools.lru_cache(maxsize=4096)
def _trace_head(execution_id: int, traceparent: str | None) -> str:
    """`00-<trace>-` of a run's attempts: every attempt of a run has it (a report each)."""
    return f"{VERSION}-{run_trace(execution_id, traceparent):032x}-"


def parse(value: object) -> tuple[int, int] | None:
    """(trace id, parent span id) of a valid `traceparent`, else None (W3C: an invalid
    header is ignored, never an error)."""
    if not isinstance(value, str):
        return None
    return _parse(value)


@functools.lru_cache(maxsize=4096)
def _parse(value: str) -> tuple[int, int] | None:
    match = _SHAPE.match(value.strip().lower())
    if match is None or match.group(1) == "ff":
        return None
    trace, span = int(match.group(2), 16), int(match.group(3), 16)
    if trace == 0 or span == 0:
        return None
    return trace, span
