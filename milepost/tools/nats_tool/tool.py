"""The nats tool: one operation per call on a connection of its own; nats-py's errors
become the tool's error kinds (the package docstring has the DSL)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.js import errors as js_errors

from milepost.playbook import nats_ops
from milepost.sanitize import Redactor
from milepost.tools import base
from milepost.tools.nats_tool.connection import Target, ToolInvalid, Unreachable, connect, target
from milepost.tools.nats_tool.operations import JS_TIMEOUT, OPERATIONS, Context, Unsupported

CLOSE_TIMEOUT = 2.0
RETRYABLE_STATUS = frozenset({408, 503})


class NatsTool:
    """Runs nats tool calls.

    Args:
        credentials: `name -> credential data (with its "type") | None`, resolving `auth`.
        default_url: the NATS URL of calls without `auth` (the process's `nats_url`).
    """

    def __init__(
        self, credentials: base.CredentialLookup | None = None, default_url: str | None = None
    ) -> None:
        self.credentials = credentials
        self.default_url = default_url

    async def run(self, call: base.ToolCall) -> base.ToolResult:
        redactor = Redactor()
        try:
            operation = _operation(call.config)
            where = target(call.config, self.credentials, self.default_url)
            redactor = where.redactor()
        except ToolInvalid as exc:
            return base.failure("invalid", redactor.text(str(exc)))
        try:
            async with asyncio.timeout(call.timeout):
                data = await _run(where, operation, call)
        except TimeoutError:  # nats-py's own timeouts are TimeoutErrors too
            limit = f" of {call.timeout:g}s" if call.timeout else ""
            return base.failure(
                "timeout",
                f"nats {operation} exceeded its timeout{limit}",
                code="Timeout",
                retryable=True,
            )
        except Unsupported as exc:
            return base.failure("invalid", redactor.text(str(exc)), code="unsupported")
        except ValueError as exc:
            return base.failure("invalid", redactor.text(str(exc)))
        except Unreachable as exc:
            return _unreachable(exc, where, redactor)
        except nats.errors.Error as exc:
            return _error(exc, operation, call.config, redactor)
        except OSError as exc:
            return base.failure(
                "connection",
                redactor.text(f"nats {operation}: {exc}"),
                code=type(exc).__name__,
                retryable=True,
            )
        return base.ToolResult(data=data)


def _operation(config: dict[str, Any]) -> str:
    """The call's operation, checked again: a templated one is known only now."""
    operation = config.get("operation")
    if not isinstance(operation, str) or operation not in nats_ops.REQUIRED:
        raise ToolInvalid(
            f"unknown nats operation {operation!r} (known: {', '.join(nats_ops.OPERATIONS)})"
        )
    lacking = nats_ops.missing(operation, config)
    if lacking:
        raise ToolInvalid(f"field {lacking[0]!r} is required for nats operation {operation!r}")
    return operation


async def _run(where: Target, operation: str, call: base.ToolCall) -> dict[str, Any]:
    client = await connect(where)
    try:
        version = client.connected_server_version
        ctx = Context(call.operation_key, (version.major, version.minor))
        return await OPERATIONS[operation](client.jetstream(timeout=JS_TIMEOUT), call.config, ctx)
    finally:
        await _close(client)


async def _close(client: Client) -> None:
    # also on cancellation: a call never leaves its connection open
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.close(), CLOSE_TIMEOUT)


def _unreachable(exc: Unreachable, where: Target, redactor: Redactor) -> base.ToolResult:
    cause = exc.cause
    url = redactor.text(where.url)
    if isinstance(cause, nats.errors.AuthorizationError) or "authorization" in str(cause).lower():
        return base.failure(
            "auth", f"NATS at {url} refused the credentials: {cause}", code=type(cause).__name__
        )
    return base.failure(
        "connection",
        redactor.text(f"cannot connect to NATS at {url}: {exc}"),
        code=type(cause).__name__,
        retryable=True,
    )


def _error(
    exc: nats.errors.Error, operation: str, config: dict[str, Any], redactor: Redactor
) -> base.ToolResult:
    message = redactor.text(f"nats {operation}: {str(exc) or type(exc).__name__}")
    code = type(exc).__name__
    if isinstance(exc, js_errors.NoStreamResponseError):
        return base.failure(
            "not_found",
            f"nats {operation}: no JetStream stream captures subject {config.get('subject')!r}",
            code=code,
        )
    if isinstance(exc, nats.errors.NoRespondersError | js_errors.ServiceUnavailableError):
        return base.failure(
            "server_error",
            f"{message} (is JetStream enabled on the server?)",
            code=code,
            retryable=True,
        )
    if isinstance(
        exc,
        js_errors.InvalidBucketNameError
        | js_errors.InvalidKeyError
        | js_errors.InvalidObjectNameError,
    ):
        return base.failure("invalid", message, code=code)
    if isinstance(
        exc,
        nats.errors.ConnectionClosedError
        | nats.errors.StaleConnectionError
        | nats.errors.OutboundBufferLimitError,
    ):
        return base.failure("connection", message, code=code, retryable=True)
    if isinstance(exc, js_errors.APIError):
        return base.failure(
            "server_error",
            message,
            code=str(exc.err_code) if exc.err_code else code,
            retryable=exc.code in RETRYABLE_STATUS,
        )
    return base.failure("server_error", message, code=code)
