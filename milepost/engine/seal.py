"""A start request's workload, kept out of the log: `execution.started` shows it masked.

Values under sensitive keys (`workload.password`, `api_token`, ...) and text that looks
like a secret are masked in the event (`sanitize.mask`): the log is what viewers read
(`GET /api/executions/{id}`, `milepost events`). The run still needs the real values
(`{{ workload.password }}`), so when masking changed anything the whole workload as
given is kept as one entry of the result store, encrypted with `MILEPOST_SECRET_KEY`
(Fernet, as the vault's credentials), and the event names that entry
(`payload.sealed_workload`). The orchestrator opens it when it folds the start, so the
render context and the workers get the real values; the events it appends for such a
run are redacted of them, and such a run is never snapshotted (`engine.orchestrator`).
The server always has the key. An embedded run without one (no credentials either)
keeps the entry as plain JSON in the local database it writes anyway: the log still
shows `***`.

Why not a separate sealed table: the result store is per execution already (sharded with
it) and never shown to viewers; a reference a client posts (`result.reference`) must parse
as JSON, which a Fernet token does not.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from typing import Any, Protocol

from cryptography.fernet import InvalidToken, MultiFernet

from milepost import sanitize
from milepost.credentials import ENV_VAR, parse_keys
from milepost.errors import MilepostError

_FERNET = b"fernet:"
_PLAIN = b"json:"


def is_sealed(data: bytes) -> bool:
    """An entry `Sealer.seal` wrote: a workload as given, never a result to show."""
    return data.startswith((_FERNET, _PLAIN))


class WorkloadUnreadable(MilepostError):
    """A sealed workload cannot be opened: the key that sealed it is not configured."""

    code = "workload_unreadable"


class BlobStore(Protocol):
    def put_blob(self, execution_id: int, data: bytes, now: float) -> str: ...
    def get_blob(self, uri: str) -> bytes: ...


class Sealer:
    """Seals workloads into a store's result entries and opens them again.

    Args:
        store: the result store (`put_blob`, `get_blob`).
        key: Fernet key(s) as in `MILEPOST_SECRET_KEY`; None reads that variable; empty:
            sealed entries are plain JSON.
    """

    def __init__(self, store: BlobStore, key: str | None = None) -> None:
        self.store = store
        self._key = key

    @functools.cached_property
    def _fernet(self) -> MultiFernet | None:
        # read when first needed: a run whose workload has nothing to seal never needs
        # the key, so a bad one fails only the runs that do
        text = os.environ.get(ENV_VAR, "") if self._key is None else self._key
        return parse_keys(text) if text.strip() else None

    def seal(
        self, execution_id: int, workload: dict[str, Any], now: float
    ) -> tuple[dict[str, Any], str | None]:
        """The workload to show (masked) and the entry holding the real one (None: nothing
        was masked, nothing is sealed)."""
        masked: dict[str, Any] = sanitize.mask(workload)
        if masked == workload:
            return workload, None
        data = json.dumps(workload, default=str, separators=(",", ":")).encode("utf-8")
        sealed = _FERNET + self._fernet.encrypt(data) if self._fernet else _PLAIN + data
        return masked, self.store.put_blob(execution_id, sealed, now)

    def open(self, uri: str) -> dict[str, Any]:
        """The real workload of a sealed entry; WorkloadUnreadable if it cannot be read."""
        try:
            data = self.store.get_blob(uri)
        except MilepostError:
            raise WorkloadUnreadable(
                f"the sealed workload {uri!r} is not in the result store", uri=uri
            ) from None
        if data.startswith(_FERNET):
            data = self._decrypt(data[len(_FERNET) :], uri)
        elif data.startswith(_PLAIN):
            data = data[len(_PLAIN) :]
        try:
            value = json.loads(data.decode("utf-8"))
        except ValueError:  # not UTF-8 or not JSON: a damaged entry, or another key's bytes
            raise WorkloadUnreadable(
                f"the sealed workload {uri!r} is not readable JSON", uri=uri
            ) from None
        if not isinstance(value, Mapping):
            raise WorkloadUnreadable(f"the sealed workload {uri!r} is not an object", uri=uri)
        return dict(value)

    def _decrypt(self, token: bytes, uri: str) -> bytes:
        if self._fernet is None:
            raise WorkloadUnreadable(
                f"the workload of this execution was sealed with {ENV_VAR}, which is not set: "
                "set it to the key the run started with",
                uri=uri,
            )
        try:
            return self._fernet.decrypt(token)
        except InvalidToken:
            raise WorkloadUnreadable(
                f"the sealed workload {uri!r} cannot be decrypted: {ENV_VAR} does not hold "
                "the key the run started with",
                uri=uri,
            ) from None
