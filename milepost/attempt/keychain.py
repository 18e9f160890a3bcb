"""Resolve a playbook's keychain for one attempt (DSL 1): `{{ keychain.<name>.<field> }}`.

Resolved values live only in the worker: they are added to the render context of the
attempt, never to an event, and every one of them is redacted from what the attempt
reports (see `sanitize`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from milepost.attempt import secret_providers
from milepost.errors import MilepostError
from milepost.playbook import model, render
from milepost.sanitize import is_sensitive_key, secret_strings
from milepost.tools.base import CredentialLookup


class CredentialMissing(MilepostError):
    """A keychain entry names a credential that is not registered."""

    code = "credential_missing"


def resolve(
    playbook: model.Playbook,
    context: Mapping[str, Any],
    credentials: CredentialLookup | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Every entry's fields; `environ` (default `os.environ`) is what provider `env` reads.
    Raises a MilepostError naming the entry when one cannot be resolved."""
    resolved: dict[str, Any] = {}
    for entry in playbook.keychain:
        where = f"keychain '{entry.name}'"
        if entry.kind == "static":
            resolved[entry.name] = render.render_value(entry.map, context, where=f"{where}: map")
        elif entry.kind == "bearer":
            token = render.render_value(entry.token, context, where=f"{where}: token")
            resolved[entry.name] = {"token": token}
        elif entry.kind == "secrets":
            paths = render.render_value(entry.map, context, where=f"{where}: map")
            fetch = secret_providers.fetcher(entry.provider or "", where, credentials, environ)
            resolved[entry.name] = {field: fetch(field, path) for field, path in paths.items()}
        else:
            data = credentials(entry.credential or "") if credentials else None
            if data is None:
                raise CredentialMissing(
                    f"{where}: credential {entry.credential!r} is not registered",
                    credential=entry.credential,
                )
            resolved[entry.name] = dict(data)
    return resolved


def secret_texts(playbook: model.Playbook, resolved: Mapping[str, Any]) -> list[str]:
    """Every text to mask for a resolved keychain: its strings, and for `static`,
    `bearer` and `secrets` entries also the text of its numbers.

    Those entries are rendered templates, and rendering coerces numeric-looking text
    (DSL 9.3): a PIN or numeric API key `"98765432"` resolves to the int 98765432.
    `secret_strings` collects only strings, so such a secret was never masked and leaked
    through tool messages and results. Of a credential only the secret fields are
    (`credential_secrets`): its host and user masked in every result ("connected to ***
    as ***") hid what a run did and protected nothing.
    """
    texts: list[str] = []
    for entry in playbook.keychain:
        value = resolved.get(entry.name)
        if entry.kind == "credential":
            texts.extend(credential_secrets(value))
        else:
            texts.extend(secret_strings(value))
            texts.extend(_number_texts(value))
    return texts


_PUBLIC_FIELDS = frozenset(
    {
        "type",
        "kind",
        "host",
        "hostname",
        "port",
        "user",
        "username",
        "login",
        "database",
        "dbname",
        "db",
        "schema",
        "sslmode",
        "region",
        "account",
        "warehouse",
        "role",
        "db_host",
        "db_port",
        "db_user",
        "db_name",
        "header",
        "name",
        "in",
    }
)
"""Credential fields that say where and as whom, not how: shown in results. Every other
field is a secret (`X-Api-Key`, `aws_secret_access_key`, `clientSecret`, an `api_key`
credential's `value`...): a field nobody listed is masked, never the reverse."""
_DSN_FIELDS = re.compile(r"(^|_)(dsn|url|uri|connection_string|conninfo)$", re.IGNORECASE)


def credential_secrets(data: Any) -> list[str]:
    """The strings of a credential's secret fields: every field but the public ones
    (`_PUBLIC_FIELDS`: host, port, user, database, schema and the like), at any depth; of
    a DSN or URL, the whole text and its password when it holds one (a DSN without a
    password is where, not how)."""
    if isinstance(data, list | tuple):
        return [text for item in data for text in credential_secrets(item)]
    if not isinstance(data, Mapping):
        return secret_strings(data)
    texts: list[str] = []
    for key, value in data.items():
        name = str(key)
        if _DSN_FIELDS.search(name) and isinstance(value, str) and not is_sensitive_key(name):
            password = _dsn_password(value)
            if password:
                texts.extend([value, password, unquote(password)])
        elif isinstance(value, Mapping | list | tuple):
            texts.extend(credential_secrets(value))
        elif name.lower() not in _PUBLIC_FIELDS:
            texts.extend(secret_strings(value))
    return texts


_URL_PASSWORD = re.compile(r"://[^\s:/@?#]*:([^\s@/?#]+)@")
_CONNINFO_PASSWORD = re.compile(r"(?:^|\s)password\s*=\s*(?:'((?:[^'\\]|\\.)*)'|(\S+))")


def _dsn_password(dsn: str) -> str | None:
    """The password of a URL (`scheme://user:password@host`) or a libpq conninfo
    (`host=... password=...`), if it holds one."""
    match = _URL_PASSWORD.search(dsn)
    if match:
        return match.group(1)
    match = _CONNINFO_PASSWORD.search(dsn)
    if match:
        return match.group(1) if match.group(1) is not None else match.group(2)
    return None


def _number_texts(value: Any) -> list[str]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [str(value)]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _number_texts(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _number_texts(v)]
    return []
