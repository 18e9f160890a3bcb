"""Resolve a playbook's keychain for one attempt (DSL 1): `{{ keychain.<name>.<field> }}`.

Resolved values live only in the worker: they are added to the render context of the
attempt, never to an event, and every one of them is redacted from what the attempt
reports (see `sanitize`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from milepost.errors import MilepostError
from milepost.playbook import model, render

CredentialLookup = Callable[[str], Mapping[str, Any] | None]


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
