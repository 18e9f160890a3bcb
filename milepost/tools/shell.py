"""The shell tool (DSL 3.4): `/bin/sh -c command`, or each of NoETL's `cmds` in turn (DSL 12)."""

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
    commands = _commands(config)
    if isinstance(commands, str):
        return base.failure("invalid", commands)
    env = config.get("env")
    if env is not None and not isinstance(env, Mapping):
        return base.failure("invalid", "shell `env` must be a mapping")
    cwd = str(config["cwd"]) if config.get("cwd") else None
    environment = _environment(env)
    runs: list[dict[str, Any]] = []
    try:
        # one deadline for the whole list; a cancel or the timeout stops the command
        # running (its process group), and the later ones never start
        async with asyncio.timeout(call.timeout):
            for command in commands:
                runs.append(await _run_one(command, cwd, environment))
                if runs[-1]["exit_code"] != 0:
                    break  # NoETL's `cmds`: stop at the first failing command
    except TimeoutError:
        return base.failure(
            "timeout",
            f"shell command exceeded timeout of {call.timeout:g}s",
            code="Timeout",
            retryable=True,
        )
    except OSError as exc:
        return base.failure("invalid", f"shell could not start: {exc}", code=type(exc).__name__)
    return _result(runs, listed="cmds" in config, total=len(commands))


def _commands(config: Mapping[str, Any]) -> list[str] | str:
    """The commands to run, in order, or the message saying why there are none. `command`
    (alias `cmd`) is one script, its lines joined if it is a list; `cmds` is a list of
    commands, each run on its own (DSL 12)."""
    if "cmds" in config:
        if "command" in config or "cmd" in config:
            return "shell takes `command` or `cmds`, not both"
        cmds = config["cmds"]
        cmds = [cmds] if isinstance(cmds, str) else cmds
        if not isinstance(cmds, list) or not cmds or not all(isinstance(c, str) for c in cmds):
            return "shell `cmds` must be a non-empty list of commands (strings)"
        if not all(c.strip() for c in cmds):
            return "shell `cmds` holds an empty command"
        return cmds
    command = config.get("command", config.get("cmd"))
    if isinstance(command, list) and all(isinstance(c, str) for c in command):
        command = "\n".join(command)
    if not isinstance(command, str) or not command.strip():
        return "shell tool needs `command` (a string)"
    return [command]


async def _run_one(command: str, cwd: str | None, env: dict[str, str] | None) -> dict[str, Any]:
    """`{exit_code, stdout, stderr}` of one command; its process group is killed if the
    wait is cancelled (a cancel of the run, or the timeout)."""
    creating = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            SHELL,
            "-c",
            command,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # so a timeout can kill the whole process group
        )
    )
    try:
        proc = await asyncio.shield(creating)
    except asyncio.CancelledError:
        # the shell may be running already (a busy loop lets the cancel land while the
        # transport connects): asyncio would kill the shell alone and then wait for its
        # children, which hold the pipes, to end by themselves; kill its group instead
        with contextlib.suppress(OSError):
            await _kill(await creating)
        raise
    try:
        stdout, stderr = await proc.communicate()
    except BaseException:
        await _kill(proc)
        raise
    code = proc.returncode if proc.returncode is not None else -1
    return {"exit_code": code, "stdout": _text(stdout), "stderr": _text(stderr)}


def _result(runs: list[dict[str, Any]], *, listed: bool, total: int) -> base.ToolResult:
    """One command's own result; for `cmds` the last one's exit code, the output of all
    of them and `results` (one per command run)."""
    out = "".join(r["stdout"] for r in runs)
    errors = "".join(r["stderr"] for r in runs)
    code = runs[-1]["exit_code"]
    data: dict[str, Any] = {"exit_code": code, "stdout": out, "stderr": errors}
    if listed:
        data["results"] = runs
    # the same text as the result's, kept as the attempt's logs too (`milepost logs`)
    streams = tuple(
        logs.Captured(name, text)
        for name, text in ((logs.STDOUT, out), (logs.STDERR, errors))
        if text
    )
    if code == 0:
        return base.ToolResult(data=data, logs=streams)
    which = f"shell command {len(runs)} of {total}" if listed else "shell command"
    return base.ToolResult(
        data=data,
        logs=streams,
        error=base.ToolFailure("exit_code", f"{which} exited with code {code}", code=str(code)),
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
