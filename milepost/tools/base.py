"""The values the tool executors take and return (DSL 3 and the envelope of DSL 5)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from milepost.core.logs import DEFAULT_CAP, Captured
from milepost.errors import MilepostError
from milepost.records import record
from milepost.sanitize import mask_patterns

CredentialLookup = Callable[[str], Mapping[str, Any] | None]
"""A registered credential's data by name (None: not registered), resolved in the worker:
the postgres tool's `auth` and the keychain's `kind: credential` entries take one."""


def auth_credential(auth: Any) -> str | None:
    """The credential a rendered postgres `auth` names: the string itself, or a mapping's
    `credential`, `key` or `name`; None when it names none. Here, not in the postgres tool,
    so a worker can foresee its credentials without importing psycopg."""
    if isinstance(auth, Mapping):
        for key in ("credential", "key", "name"):
            if isinstance(auth.get(key), str) and auth[key]:
                return str(auth[key])
        return None
    return auth if isinstance(auth, str) and auth else None


def credential(
    name: str, credentials: CredentialLookup | None, tool: str, error: type[Exception]
) -> Mapping[str, Any]:
    """The data of the credential a tool's `auth` names, or `error` saying why there is
    none (`<tool> auth: ...`): the lookup's own refusal, or not registered."""
    try:
        data = credentials(name) if credentials is not None else None
    except MilepostError as exc:  # e.g. credential_unreadable: the key changed
        raise error(f"{tool} auth: {exc.message}") from None
    if data is None:
        raise error(f"{tool} auth: credential {name!r} is not registered")
    return data


ERROR_KINDS = frozenset(
    {
        "exception",
        "timeout",
        "rate_limit",
        "auth",
        "not_found",
        "client_error",
        "server_error",
        "connection",
        "exit_code",
        "db_error",
        "db_connection",
        "playbook",
        "invalid",
    }
)


@record
class ToolCall:
    """One execution of a tool, with every template already rendered."""

    kind: str
    """Tool kind: python, http, shell, duckdb, noop."""
    config: dict[str, Any]
    """Rendered tool fields other than kind/name/input/spec/set (url, method, code, libs...)."""
    input: dict[str, Any]
    """Rendered inputs."""
    context: dict[str, Any]
    """JSON-able snapshot of the render context (python's `context` global): the names the
    step's templates read, or all of them when its python code mentions `context`
    (`playbook.reads`)."""
    idempotency_key: str
    """DSL 10.4; sent as `Idempotency-Key` by non-GET http calls."""
    operation_key: str = ""
    """DSL 10.4: the same for every attempt of this step run and loop index."""
    timeout: float | None = None
    """Seconds; enforced by the executor (python kills its worker process)."""
    execution_id: str = ""
    step: str = ""
    command_id: int = 0
    epoch: int = 0
    """The claim this attempt runs under: the `playbook` tool shows it to start children."""
    redact: Callable[[str], str] = mask_patterns
    """What a tool applies to any text it logs (its output, an error quoting it): the
    attempt's `Redactor.text`, so a log line hides what the events hide."""
    log_cap: int = DEFAULT_CAP
    """Bytes of each stream a tool keeps of what its code printed (`core.logs.Capped`)."""

    def where(self) -> str:
        """` (execution X step Y command Z)`, for log messages read without `extra`."""
        return (
            f" (execution {self.execution_id or '-'} step {self.step or '-'}"
            f" command {self.command_id or '-'})"
        )

    def log_extra(self, action: str) -> dict[str, Any]:
        return {
            "action": action,
            "execution_id": self.execution_id,
            "step": self.step,
            "command_id": self.command_id,
        }


@record
class ToolFailure:
    """Why a tool call failed: the `error` of the output envelope. A value a tool returns
    in its `ToolResult`, never raises (hence not `...Error`)."""

    kind: str
    """One of ERROR_KINDS."""
    message: str
    code: str | None = None
    retryable: bool = False
    status: int | None = None
    """HTTP status, http tool only."""
    line: int | None = None
    """Python: the line of the step's `code` the exception left last (its last frame there)."""
    code_line: str | None = None
    """Python: that line's text (redacted)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "message": self.message,
            "retryable": self.retryable,
            "code": self.code,
        }
        for name in ("status", "line", "code_line"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


@record
class ToolResult:
    """What one tool call produced."""

    data: Any = None
    """The result; on error the partial result (e.g. the HTTP response) or None."""
    error: ToolFailure | None = None
    http: dict[str, Any] | None = None
    """`{status, headers}` for http calls that got a response."""
    retry_after: float | None = None
    """Seconds, from a Retry-After response header."""
    duration_ms: float = 0.0
    usage: Any = None
    """What the call reported using (python: the `usage` global), as the tool gave it:
    the attempt runner checks it (`attempt.usage`)."""
    logs: tuple[Captured, ...] = ()
    """What the call printed, per stream (python, shell), not yet redacted: the attempt
    runner redacts, caps and reports it beside the result (`core.logs`)."""

    @property
    def ok(self) -> bool:
        return self.error is None


def failure(kind: str, message: str, **fields: Any) -> ToolResult:
    """A ToolResult carrying only an error."""
    return ToolResult(error=ToolFailure(kind, message, **fields))
