"""The errors of the client: a refusal of the server (`ServerRefused`, with its status and
stable `code`), a server that cannot be reached, no server to ask, a wait that ran out."""

from __future__ import annotations

from typing import Any

import httpx

from milepost.errors import MilepostError


class ServerRefused(MilepostError):
    """The server refused the request.

    `status` is the HTTP status, `code` the stable code of the body, `fields` the rest of
    the body (`problems`, `errors`, the execution's `status` of `already_terminal`...).
    """

    code = "server_refused"

    def __init__(self, status: int, code: str, message: str, /, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.status = status
        self.code = code

    def to_dict(self) -> dict[str, Any]:
        """The error body as the server sent it, plus `http_status`."""
        return {**super().to_dict(), "http_status": self.status}

    @property
    def transient(self) -> bool:
        """A server-side failure (5xx, 429) that may go away by itself."""
        return self.status >= 500 or self.status == 429


class ServerUnavailable(MilepostError):
    """The server could not be reached."""

    code = "server_unavailable"


class NoServer(MilepostError):
    """No server URL: pass one or set MILEPOST_SERVER_URL."""

    code = "no_server"


class WaitTimeout(MilepostError):
    """The execution did not end in time."""

    code = "wait_timeout"


def error_of(response: httpx.Response) -> ServerRefused:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        text = response.text.strip()[:500] or response.reason_phrase
        code = "internal" if response.status_code >= 500 else f"http_{response.status_code}"
        return ServerRefused(response.status_code, code, text)
    return error_of_body(response.status_code, body, response.reason_phrase)


def error_of_body(status: int, body: dict[str, Any], fallback: str = "") -> ServerRefused:
    """The ServerRefused of an error body `{code, message, ...fields}` (HTTP or the worker channel)."""
    code = str(body.get("code") or f"http_{status}")
    message = str(body.get("message") or body.get("detail") or fallback)
    fields = {k: v for k, v in body.items() if k not in ("code", "message")}
    return ServerRefused(status, code, message, **fields)
