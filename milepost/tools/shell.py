"""The shell tool (DSL 3.4): `/bin/sh -c command`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from typing import Any

from milepost.core import logs
from milepost.tools import base

SHELL = "/bin/sh"


async def run(call: base.ToolCall) -> base.ToolResult:
    config = call.config
    command = config.get("command", config.get("cmd"))
    if isinstance(command, list) and all(isinstance(c, str) for c in command):
        command = "\n".join(command)
    if not isinstance(command, str) or not command.strip():
        return base.failure("invalid", "shell tool needs `command` (a string)")
    env = config.get("env")
    if env is not None and not isinstance(env, Mapping):
        return base.failure("invalid", "shell `env` must be a mapping")
    cwd = config.get("cwd")
    try:
        proc = await asyncio.create_subprocess_exec(
            SHELL,
            "-c",
            command,
            cwd=str(cwd) if cwd else None,
            env=_environment(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # so a timeout can kill the whole process group
        )
    except OSError as exc:
        return base.failure("invalid", f"shell could not start: {exc}", code=type(exc).__name__)
    try:
        async with asyncio.timeout(call.timeout):
            stdout, stderr = await proc.communicate()
    except BaseException as exc:
        await _kill(proc)
        if isinstance(exc, TimeoutError):
            return base.failure(
                "timeout",
                f"shell command exceeded timeout of {call.timeout:g}s",
                code="Timeout",
                retryable=True,
            )
        raise
    code = proc.returncode if proc.returncode is not None else -1
    out, errors = _text(stdout), _text(stderr)
    data = {"exit_code": code, "stdout": out, "stderr": errors}
    # the same text as the result's, kept as the attempt's logs too (`milepost logs`)
    streams = tuple(logs.Captured(name, text) for name, text in
                    ((logs.STDOUT, out), (logs.STDERR, errors)) if text)  # fmt: skip
    if code == 0:
        return base.ToolResult(data=data, logs=streams)
    return base.ToolResult(
        data=data, logs=streams,
        error=base.ToolFailure("exit_code", f"shell command exited with code {code}", code=str(code)),
    )


def _environment(env: Mapping[str, Any] | None) -> dict[str, str] | None:
    if not env:
        return None
    merged = dict(os.environ)
    for key, value in env.items():
        if value is None:
            merged.pop(str(key), None)
        else:
            merged[str(key)] = value if isinstance(value, str) else _scalar(value)
    return merged


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """Kill the command's process group and reap it (closing its pipes)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(Exception):  # drain the pipes so the transport closes
        await asyncio.wait_for(proc.communicate(), 5.0)
