"""Credentials encrypted at rest (server contract, "Secrets").

A credential is a name, a type (`postgres`, `http`, ...) and a JSON mapping of data. The
store keeps the name and type in the clear and the data as a Fernet token
(`cryptography.fernet`: AES-128-CBC with an HMAC-SHA256 over it, so a changed byte is
detected, never decrypted into garbage). The token holds `{"name", "type", "data"}`, so a
ciphertext moved to another credential's row is refused too.

The key comes from `MILEPOST_SECRET_KEY`: a Fernet key, 32 random bytes in url-safe base64
(`milepost secret-key` or `new_key()` makes one).

Key rotation: the variable may hold several keys separated by commas,
`MILEPOST_SECRET_KEY=<new>,<old>`. The first key encrypts everything written from then on;
every key is tried to decrypt. To rotate: put the new key first and keep the old one after
it, run `Vault.rotate()` (re-encrypts every credential with the first key), then drop the old
key.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from milepost.errors import MilepostError

ENV_VAR = "MILEPOST_SECRET_KEY"
_HOW_TO_MAKE = (
    "`milepost secret-key` prints a new one, or run "
    "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
)


class SecretKeyMissing(MilepostError):
    """MILEPOST_SECRET_KEY is not set."""

    code = "secret_key_missing"

    def __init__(self, message: str | None = None, **fields: Any) -> None:
        super().__init__(
            message
            or f"{ENV_VAR} is not set: set it to a Fernet key to encrypt credentials "
            f"({_HOW_TO_MAKE})",
            **fields,
        )


class SecretKeyInvalid(MilepostError):
    """MILEPOST_SECRET_KEY is not a Fernet key."""

    code = "secret_key_invalid"


class CredentialUnreadable(MilepostError):
    """A stored credential cannot be decrypted: wrong key or altered data."""

    code = "credential_unreadable"


NAME_RULE = (
    "a credential name is letters, digits, '.', '_' and '-', not starting with a "
    "dot, at most 128 characters"
)
"""Names travel in URL paths (`/api/credentials/{name}`) and keychain entries: `a/b` or `..`
could be stored but never read or deleted again."""
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def check_name(name: str) -> str:
    """`name` when it follows `NAME_RULE`; ValueError naming the rule otherwise."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"{NAME_RULE}, got {name!r}")
    return name


class CredentialNameInvalid(MilepostError):
    """The credential name breaks `NAME_RULE`."""

    code = "credential_name_invalid"


class CredentialRow(Protocol):
    """What the store returns for one credential."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def ciphertext(self) -> bytes | bytearray | memoryview | str | None: ...
    @property
    def created_at(self) -> float: ...
    @property
    def updated_at(self) -> float: ...


class CredentialStore(Protocol):
    """The credential part of the `Store` (docs/server-contract.md, "Store additions")."""

    def put_credential(self, name: str, type: str, ciphertext: bytes, now: float) -> Any: ...
    def get_credential(self, name: str) -> CredentialRow | None: ...
    def list_credentials(self) -> Any: ...
    def delete_credential(self, name: str) -> bool: ...


def new_key() -> str:
    """A new random Fernet key (url-safe base64 text), for `MILEPOST_SECRET_KEY`."""
    return Fernet.generate_key().decode("ascii")


def parse_keys(keys: str | bytes, *, source: str = ENV_VAR) -> MultiFernet:
    """One or more comma-separated Fernet keys; the first encrypts, all decrypt.

    Raises SecretKeyMissing when no key is given, SecretKeyInvalid when one is not a Fernet
    key (the message says which by position, never the key itself).
    """
    text = keys.decode("ascii", "replace") if isinstance(keys, bytes) else keys
    parts = [part.strip() for part in text.split(",")]
    parts = [part for part in parts if part]
    if not parts:
        raise SecretKeyMissing()
    fernets: list[Fernet] = []
    for position, part in enumerate(parts, start=1):
        try:
            fernets.append(Fernet(part.encode("ascii")))
        except (ValueError, TypeError, UnicodeEncodeError):
            which = f"key {position} of {len(parts)}" if len(parts) > 1 else "the key"
            raise SecretKeyInvalid(
                f"{source}: {which} is not a Fernet key (32 random bytes in url-safe "
                f"base64, 44 characters); {_HOW_TO_MAKE}"
            ) from None
    return MultiFernet(fernets)


class Vault:
    """Encrypts credential data into a store and decrypts it back.

    `get` has the shape of the credential lookup the worker takes
    (`ToolRuntime(credentials=vault.get)`).

    Args:
        store: has `put_credential`, `get_credential`, `list_credentials`,
            `delete_credential`.
        key: one Fernet key, or several separated by commas (the first encrypts, all
            decrypt: see the module docstring for rotation).
        clock: the `now` given to the store.
    """

    def __init__(
        self,
        store: CredentialStore,
        key: str | bytes,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.clock = clock
        self._fernet = parse_keys(key)

    @classmethod
    def from_env(
        cls,
        store: CredentialStore,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> Vault:
        """A vault keyed by `MILEPOST_SECRET_KEY`; SecretKeyMissing if it is unset or empty."""
        value = (os.environ if environ is None else environ).get(ENV_VAR, "")
        if not value.strip():
            raise SecretKeyMissing()
        return cls(store, value, clock=clock)

    def __repr__(self) -> str:
        return f"Vault(store={self.store!r})"

    def put(self, name: str, type: str, data: Mapping[str, Any]) -> None:
        """Register or replace credential `name` of `type` with `data` (a JSON mapping)."""
        if not isinstance(name, str) or not name:
            raise MilepostError("a credential needs a name")
        try:
            check_name(name)
        except ValueError as exc:
            raise CredentialNameInvalid(str(exc), name=name) from None
        if not isinstance(type, str) or not type:
            raise MilepostError(f"credential {name!r} needs a type")
        if not isinstance(data, Mapping):
            raise MilepostError(f"credential {name!r}: data must be a mapping")
        try:
            payload = json.dumps(
                {"name": name, "type": type, "data": dict(data)},
                separators=(",", ":"),
                allow_nan=False,
            )
        except (TypeError, ValueError) as exc:
            raise MilepostError(f"credential {name!r}: data is not JSON: {exc}") from None
        token = self._fernet.encrypt(payload.encode("utf-8"))
        self.store.put_credential(name, type, token, self.clock())

    def get(self, name: str) -> dict[str, Any] | None:
        """The decrypted data of credential `name` plus its `type`; None if not registered.

        Raises CredentialUnreadable if the data cannot be decrypted (another key, altered
        bytes) or belongs to another credential.
        """
        row = self.store.get_credential(name)
        if row is None:
            return None
        data = self._decrypt(row)
        return {**data, "type": row.type}

    __call__ = get

    def list(self) -> list[dict[str, Any]]:
        """`{name, type, created_at, updated_at}` of every credential; never the data."""
        return [_info(row) for row in self.store.list_credentials()]

    def info(self, name: str) -> dict[str, Any] | None:
        """`{name, type, created_at, updated_at}` of credential `name` (never the data);
        None if not registered."""
        row = self.store.get_credential(name)
        return None if row is None else _info(row)

    def delete(self, name: str) -> bool:
        """Forget credential `name`; False if it was not registered."""
        return bool(self.store.delete_credential(name))

    def rotate(self) -> int:
        """Re-encrypt every credential with the first key; returns how many were rewritten.

        Raises CredentialUnreadable (nothing is lost) if one cannot be decrypted by any key.
        """
        count = 0
        for listed in self.store.list_credentials():
            row = self.store.get_credential(listed.name)
            if row is None:
                continue
            self._decrypt(row)  # refuse before writing anything unreadable
            token = self._fernet.rotate(_token_bytes(row))
            self.store.put_credential(row.name, row.type, token, self.clock())
            count += 1
        return count

    def _decrypt(self, row: CredentialRow) -> dict[str, Any]:
        unreadable = CredentialUnreadable(
            f"credential {row.name!r} cannot be decrypted: {ENV_VAR} does not hold the key "
            "it was encrypted with, or the stored data was altered",
            credential=row.name,
        )
        try:
            plain = self._fernet.decrypt(_token_bytes(row))
            payload = json.loads(plain.decode("utf-8"))
        except (InvalidToken, ValueError, TypeError):
            raise unreadable from None
        if (
            not isinstance(payload, dict)
            or payload.get("name") != row.name
            or payload.get("type") != row.type
            or not isinstance(payload.get("data"), dict)
        ):
            raise unreadable
        data: dict[str, Any] = payload["data"]
        return data


def _info(row: CredentialRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "type": row.type,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def _token_bytes(row: CredentialRow) -> bytes:
    value = row.ciphertext
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("ascii", "replace")
    return bytes(value)
