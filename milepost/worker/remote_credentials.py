"""Credentials for the HTTP worker, resolved through the server and cached briefly.

The tools take a *synchronous* lookup (`tools.base.CredentialLookup`, `ToolRuntime(
credentials=...)`) and call it on the event loop. So before an attempt the worker
fetches, asynchronously, every credential the step can be seen to need (keychain
entries, the vault paths of `secrets` entries, postgres, http and nats `auth` names,
rendered when they are templates); the lookup answers
from that cache. A name it could not foresee is fetched with a short blocking request
(rare; it holds the loop for one round trip). Values are never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from milepost.attempt.secret_providers import vault_path
from milepost.client import ServerRefused, ServerUnavailable
from milepost.errors import MilepostError
from milepost.playbook import model, render
from milepost.playbook.coercion import is_template
from milepost.tools.base import auth_credential

log = logging.getLogger(__name__)

TTL = 30.0
AsyncFetch = Callable[[str], Awaitable[dict[str, Any] | None]]
SyncFetch = Callable[[str], dict[str, Any] | None]


class CredentialsUnavailable(MilepostError):
    """The server could not be asked for a credential (it may come back)."""

    code = "credentials_unavailable"


class CredentialRefused(MilepostError):
    """The server refused to hand out a credential."""

    code = "credential_refused"


class RemoteCredentials:
    """A short-lived cache of credential data fetched from the server.

    Args:
        fetch: the async fetch (`AsyncMilepostClient.credential`).
        fetch_sync: the blocking fetch for names not prefetched; None = such names fail.
        clock: seconds, for the time-to-live.
        ttl: how long a value (or its absence) is kept.
    """

    def __init__(
        self,
        fetch: AsyncFetch,
        fetch_sync: SyncFetch | None,
        clock: Callable[[], float],
        ttl: float = TTL,
    ) -> None:
        self._fetch = fetch
        self._fetch_sync = fetch_sync
        self._clock = clock
        self.ttl = ttl
        self._cache: dict[str, tuple[float, dict[str, Any] | None]] = {}

    def _fresh(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        cached = self._cache.get(name)
        if cached is not None and cached[0] > self._clock():
            return True, cached[1]
        return False, None

    async def prefetch(self, names: Iterable[str]) -> None:
        """Fetch every name not cached. Raises CredentialsUnavailable (transient) or
        CredentialRefused."""
        for name in sorted(set(names)):
            if self._fresh(name)[0]:
                continue
            try:
                data = await self._fetch(name)
            except (ServerRefused, ServerUnavailable) as exc:
                raise _problem(name, exc) from exc
            self._store(name, data)

    def __call__(self, name: str) -> Mapping[str, Any] | None:
        """The sync lookup the tools call: the cached data (with its `type`), or None."""
        hit, data = self._fresh(name)
        if hit:
            return data
        if self._fetch_sync is None:
            raise CredentialsUnavailable(
                f"credential {name!r} was not fetched before the attempt", credential=name
            )
        log.info(
            "fetching credential %r during the attempt",
            name,
            extra={"action": "credential_fetch_blocking", "credential": name},
        )
        try:
            data = self._fetch_sync(name)
        except (ServerRefused, ServerUnavailable) as exc:
            raise _problem(name, exc) from exc
        self._store(name, data)
        return data

    def _store(self, name: str, data: dict[str, Any] | None) -> None:
        self._cache[name] = (self._clock() + self.ttl, data)


def _problem(name: str, exc: ServerRefused | ServerUnavailable) -> MilepostError:
    if isinstance(exc, ServerUnavailable) or exc.transient:
        return CredentialsUnavailable(
            f"credential {name!r}: the server is unavailable", credential=name
        )
    return CredentialRefused(
        f"credential {name!r} cannot be read: {exc.code} ({exc.message})", credential=name
    )


def names_for(playbook: model.Playbook, step: str, context: Mapping[str, Any]) -> set[str]:
    """The credentials an attempt of `step` can be seen to need before it runs."""
    names = {e.credential for e in playbook.keychain if e.kind == "credential" and e.credential}
    names.update(vault_names(playbook.keychain, context))
    target = playbook.steps.get(step)
    if target is None:
        return names
    for task in target.tasks:
        kind, config = task.kind, task.config
        if kind == "workbook":
            entry = playbook.workbook.get(str(config.get("name")))
            if entry is None:
                continue
            kind, config = entry.task.kind, entry.task.config
        if kind in _AUTH_KINDS and config.get("auth"):
            name = _auth_name(config["auth"], context)
            if name:
                names.add(name)
    return names


_AUTH_KINDS = frozenset({"postgres", "http", "nats"})
"""Tools whose `auth` names a credential."""


def vault_names(keychain: Iterable[model.KeychainEntry], context: Mapping[str, Any]) -> set[str]:
    """The credentials the `secrets` entries of provider `milepost` read (`<name>.<field>`)."""
    names: set[str] = set()
    for entry in keychain:
        if entry.kind != "secrets" or entry.provider != "milepost":
            continue
        for path in entry.map.values():
            rendered = _rendered(path, context)
            split = vault_path(rendered) if isinstance(rendered, str) else None
            if split is not None:
                names.add(split[0])
    return names


def _rendered(value: Any, context: Mapping[str, Any]) -> Any:
    if not is_template(value):
        return value
    try:
        return render.render_value(value, context, where="credential name")
    except Exception:  # noqa: BLE001 - only a guess; the attempt reports its own errors
        return None


def _auth_name(auth: Any, context: Mapping[str, Any]) -> str | None:
    if is_template(auth) or isinstance(auth, Mapping):
        try:
            auth = render.render_value(auth, context, where="tool auth")
        except Exception:  # noqa: BLE001 - only a guess; the tool reports its own errors
            return None
    return auth_credential(auth)
