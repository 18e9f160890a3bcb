"""Resolve a playbook's keychain for one attempt (DSL 1): `{{ keychain.<name>.<field> }}`.

Resolved values live only in the worker: they are added to the render context of the
attempt, never to an event, and every one of them is redacted from what the attempt
reports (see `sanitize`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from milepost.errors import MilepostError
from milepost.playbook import model, render
from milepost.sanitize import secret_strings
from milepost.tools.base import CredentialLookup


class CredentialMissing(MilepostError):
    """A keychain entry names a credential that is not registered."""

    code = "credential_missing"


def resolve(playbook: model.Playbook, context: Mapping[str, Any],
            credentials: CredentialLookup | None = None) -> dict[str, Any]:  # fmt: skip
    resolved: dict[str, Any] = {}
    for entry in playbook.keychain:
        where = f"keychain '{entry.name}'"
        if entry.kind == "static":
            resolved[entry.name] = render.render_value(entry.map, context, where=f"{where}: map")
        elif entry.kind == "bearer":
            token = render.render_value(entry.token, context, where=f"{where}: token")
            resolved[entry.name] = {"token": token}
        else:
            data = credentials(entry.credential or "") if credentials else None
            if data is None:
                raise CredentialMissing(
                    f"{where}: credential {entry.credential!r} is not registered",
                    credential=entry.credential)  # fmt: skip
            resolved[entry.name] = dict(data)
    return resolved


def secret_texts(playbook: model.Playbook, resolved: Mapping[str, Any]) -> list[str]:
    """Every text to mask for a resolved keychain: its strings, and for `static` and
    `bearer` entries also the text of its numbers.

    Those entries are rendered templates, and rendering coerces numeric-looking text
    (DSL 9.3): a PIN or numeric API key `"98765432"` resolves to the int 98765432.
    `secret_strings` collects only strings, so such a secret was never masked and leaked
    through tool messages and results. Credential data keeps its registered types (a
    `port: 5432` is not a secret), so only its strings are masked.
    """
    texts: list[str] = []
    for entry in playbook.keychain:
        value = resolved.get(entry.name)
        texts.extend(secret_strings(value))
        if entry.kind != "credential":
            texts.extend(_number_texts(value))
    return texts


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
