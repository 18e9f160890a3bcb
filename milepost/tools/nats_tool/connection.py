"""Where a nats tool call connects: its `auth` credential (type `nats`) or the process's
NATS URL; and the connection itself, made once per call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import nats
from nats.aio.client import Client

from milepost.sanitize import Redactor
from milepost.tools import base

CREDENTIAL_TYPES = frozenset({"nats"})
CONNECT_TIMEOUT = 5
"""Seconds one attempt at connecting may take (the call's own timeout bounds it too)."""


class ToolInvalid(Exception):
    """The tool mapping or its credential cannot be used (error kind `invalid`)."""


@dataclass(frozen=True)
class Target:
    """The server of one call and how to log in."""

    url: str
    options: dict[str, Any] = field(default_factory=dict)
    """`user`/`password` or `token`, as `nats.connect` takes them."""

    def redactor(self) -> Redactor:
        secrets = [str(v) for k, v in self.options.items() if k in ("password", "token") and v]
        password = urlsplit(self.url).password if "@" in self.url else None
        if password:
            secrets.append(password)
        return Redactor(secrets)


def target(
    config: Mapping[str, Any], credentials: base.CredentialLookup | None, default_url: str | None
) -> Target:
    """The server of a call: its `auth` credential, else `default_url`."""
    auth = config.get("auth")
    if auth is None or auth == "":
        if not default_url:
            raise ToolInvalid(
                "nats tool needs `auth` (a credential of type nats) or a NATS "
                "URL for the process (MILEPOST_NATS_URL)"
            )
        return Target(default_url)
    name = base.auth_credential(auth)
    if name is None:
        raise ToolInvalid("nats `auth` must name a registered credential")
    data = base.credential(name, credentials, "nats", ToolInvalid)
    kind = data.get("type")
    if kind is not None and str(kind).lower() not in CREDENTIAL_TYPES:
        raise ToolInvalid(f"nats auth: credential {name!r} has type {kind!r}, not nats")
    url = data.get("url") or data.get("servers")
    if not isinstance(url, str) or not url:
        raise ToolInvalid(f"nats auth: credential {name!r} has no `url`")
    options: dict[str, Any] = {}
    user = data.get("user", data.get("username"))
    if user:
        options["user"] = str(user)
        options["password"] = "" if data.get("password") is None else str(data["password"])
    elif data.get("token"):
        options["token"] = str(data["token"])
    return Target(url, options)


async def connect(where: Target) -> Client:
    """A connection to `where`; raises nats-py's errors (`NoServersError` with the last
    attempt's error in `error`) when the server cannot be reached."""
    errors: list[Exception] = []

    async def note(exc: Exception) -> None:
        # nats-py logs a traceback per failed attempt unless told where errors go
        errors.append(exc)

    servers = [s.strip() for s in where.url.split(",") if s.strip()]
    try:
        # one try per server (nats-py's initial connect loops until attempts run out),
        # no reconnects: a call that loses its connection fails and is retried
        return await nats.connect(
            servers,
            connect_timeout=CONNECT_TIMEOUT,
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=0,
            error_cb=note,
            name="milepost-nats-tool",
            **where.options,
        )
    except nats.errors.NoServersError as exc:
        raise Unreachable(errors[-1] if errors else exc) from exc


class Unreachable(Exception):
    """No server of the call could be reached; `cause` is the last attempt's error."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        self.cause = cause
