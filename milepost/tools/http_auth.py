"""The headers an http tool's `auth: <credential name>` adds (DSL 12), by credential type.

| type | data | header |
|---|---|---|
| `bearer` | `token` | `Authorization: Bearer <token>` |
| `basic` | `username` (or `user`), `password` | `Authorization: Basic <base64 user:password>` |
| `api_key` | `key` (the header name; `header` too), `value` | `<key>: <value>` |
| `header` | any fields | each field a header (`type` excepted) |

The credential is resolved in the worker through the same lookup as the postgres tool's
`auth` (`base.CredentialLookup`). Every value this module puts in a header is returned as
a secret as well, so the tool masks it wherever the response might echo it: the attempt's
own redactor does not know the credential (only the keychain's values).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from milepost.tools import base

TYPES = ("bearer", "basic", "api_key", "header")
"""The credential types http `auth` accepts, in the order error messages list them."""


class AuthInvalid(ValueError):
    """`auth` names no usable credential (error kind `invalid`)."""


@dataclass(frozen=True, slots=True)
class AuthHeaders:
    headers: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    """The texts to mask in what the call returns: header values and their parts."""


def auth_headers(auth: Any, credentials: base.CredentialLookup | None) -> AuthHeaders:
    """The headers of the credential `auth` names; none when `auth` is absent or empty.

    Raises AuthInvalid naming the credential: not registered, unreadable, of a type http
    does not know, or missing a field its type needs."""
    if auth is None or auth == "":
        return AuthHeaders()
    name = base.auth_credential(auth)
    if name is None:
        raise AuthInvalid(
            "http `auth` must name a registered credential"
            + ("" if isinstance(auth, Mapping) else " (a string)")
        )
    data = base.credential(name, credentials, "http", AuthInvalid)
    kind = str(data.get("type") or "").lower()
    fields = {str(k): v for k, v in data.items() if k != "type"}
    if kind == "bearer":
        token = _field(fields, name, kind, "token")
        return AuthHeaders({"Authorization": f"Bearer {token}"}, (token,))
    if kind == "basic":
        user = _field(fields, name, kind, "username", "user")
        password = _field(fields, name, kind, "password")
        encoded = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        return AuthHeaders({"Authorization": f"Basic {encoded}"}, (password, encoded))
    if kind == "api_key":
        header = _field(fields, name, kind, "key", "header")
        value = _field(fields, name, kind, "value")
        return AuthHeaders({header: value}, (value,))
    if kind == "header":
        headers = {k: _text(v) for k, v in fields.items() if v is not None}
        if not headers:
            raise AuthInvalid(f"http auth: credential {name!r} of type 'header' has no fields")
        return AuthHeaders(headers, tuple(headers.values()))
    raise AuthInvalid(
        f"http auth: credential {name!r} has type {data.get('type')!r}; http accepts the "
        f"types {', '.join(TYPES)}"
    )


def _field(fields: Mapping[str, Any], name: str, kind: str, *keys: str) -> str:
    for key in keys:
        value = fields.get(key)
        if value is not None and value != "":
            return _text(value)
    which = " or ".join(repr(k) for k in keys)
    raise AuthInvalid(f"http auth: credential {name!r} of type {kind!r} needs the field {which}")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)
