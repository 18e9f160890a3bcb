"""The libpq parameters of a postgres tool call: from `auth` (a registered credential of
type `postgres`) and/or `connection_string`, and the redactor that masks their secrets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from milepost.sanitize import Redactor
from milepost.tools import base

CREDENTIAL_TYPES = frozenset({"postgres", "postgresql"})
FIELD_ALIASES = {
    "host": "host",
    "db_host": "host",
    "port": "port",
    "db_port": "port",
    "user": "user",
    "username": "user",
    "db_user": "user",
    "password": "password",
    "db_password": "password",
    "database": "dbname",
    "dbname": "dbname",
    "db_name": "dbname",
}
"""Credential data keys -> libpq parameters."""
PASSTHROUGH = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslpassword",
        "application_name",
        "connect_timeout",
        "options",
        "target_session_attrs",
        "hostaddr",
    }
)
"""libpq parameters a credential may also carry, used as is."""
DEFAULT_CONNECT_TIMEOUT = 10


class ToolInvalid(Exception):
    """The tool mapping or its credential cannot be used (error kind `invalid`)."""


def connection_params(
    config: Mapping[str, Any], credentials: base.CredentialLookup | None
) -> dict[str, Any]:
    """libpq parameters from `auth` (a credential name) and/or `connection_string`."""
    params: dict[str, Any] = {}
    dsn = config.get("connection_string")
    if dsn is not None and dsn != "":
        if not isinstance(dsn, str):
            raise ToolInvalid("postgres `connection_string` must be a string")
        params.update(_parse_dsn(dsn, "connection_string"))
    auth = config.get("auth")
    if auth is not None and auth != "":
        params.update(_credential_params(_credential_name(auth), credentials))
    elif not params:
        raise ToolInvalid(
            "postgres tool needs `auth` (a registered credential) or `connection_string`"
        )
    params.setdefault("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    return params


def _credential_name(auth: Any) -> str:
    name = base.auth_credential(auth)
    if name is None:
        raise ToolInvalid(
            "postgres `auth` must name a registered credential"
            + ("" if isinstance(auth, Mapping) else " (a string)")
        )
    return name


def _credential_params(name: str, credentials: base.CredentialLookup | None) -> dict[str, Any]:
    data = base.credential(name, credentials, "postgres", ToolInvalid)
    kind = data.get("type")
    if kind is not None and str(kind).lower() not in CREDENTIAL_TYPES:
        raise ToolInvalid(f"postgres auth: credential {name!r} has type {kind!r}, not postgres")
    params: dict[str, Any] = {}
    base_dsn = data.get("connection_string", data.get("dsn"))
    if isinstance(base_dsn, str) and base_dsn:
        params.update(_parse_dsn(base_dsn, f"credential {name!r}"))
    for key, value in data.items():
        target = FIELD_ALIASES.get(key) or (key if key in PASSTHROUGH else None)
        if target is None or value is None or value == "":
            continue
        if target == "port":
            value = _port(value, name)
        elif target == "password" and not isinstance(value, str):
            value = str(value)
        params[target] = value
    return params


def _port(value: Any, name: str) -> int:
    try:
        port = int(str(value).strip())
    except ValueError:
        raise ToolInvalid(
            f"postgres auth: credential {name!r} has a port that is not a number"
        ) from None
    if not 0 < port < 65536:
        raise ToolInvalid(f"postgres auth: credential {name!r} has port {port} out of range")
    return port


def _parse_dsn(dsn: str, where: str) -> dict[str, Any]:
    try:
        return dict(conninfo_to_dict(dsn))
    except psycopg.ProgrammingError:
        # libpq's message may quote the string, password included
        raise ToolInvalid(f"postgres {where}: not a valid connection string") from None


def dsn_key(params: Mapping[str, Any]) -> str:
    return "\x00".join(f"{k}={params[k]}" for k in sorted(params))


def redactor(params: Mapping[str, Any], config: Mapping[str, Any]) -> Redactor:
    secrets = [str(params["password"])] if params.get("password") else []
    dsn = config.get("connection_string")
    if isinstance(dsn, str) and dsn:
        secrets.append(dsn)
    return Redactor(secrets)
