"""The playbooks a worker runs, fetched from its server's catalog once per (path, version)
and kept for the commands that follow."""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Protocol

from milepost.client import ServerRefused, ServerUnavailable
from milepost.errors import MilepostError
from milepost.playbook import load, model

PLAYBOOK_CACHE = 256


class CatalogUnavailable(MilepostError):
    """The catalog could not be read now, in a way that may pass: give the command back."""

    code = "catalog_unavailable"


class Catalog(Protocol):
    async def resource(self, path: str, version: int | None = None) -> dict[str, Any]: ...


class Playbooks:
    """The last `PLAYBOOK_CACHE` playbooks asked for; one fetch serves every command that
    asks while it is on its way, and a failed fetch is forgotten (the next command asks
    again)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._cache: collections.OrderedDict[
            tuple[str, int | None], asyncio.Future[model.Playbook]
        ] = collections.OrderedDict()

    async def get(self, ref: dict[str, Any]) -> model.Playbook:
        """The playbook of a command's `playbook` reference `{path, version}`.

        Raises:
            CatalogUnavailable: the server could not answer now.
            MilepostError: it refused, or the entry does not load.
        """
        path = str(ref.get("path") or "")
        version = ref.get("version")
        key = (path, None if version is None else int(version))
        future = self._cache.get(key)
        if future is None:
            future = asyncio.ensure_future(self._fetch(*key))
            self._cache[key] = future
            while len(self._cache) > PLAYBOOK_CACHE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        try:
            return await asyncio.shield(future)
        except MilepostError:
            if self._cache.get(key) is future:
                del self._cache[key]  # the next command of this playbook asks again
            raise

    async def _fetch(self, path: str, version: int | None) -> model.Playbook:
        try:
            entry = await self.catalog.resource(path, version)
        except ServerRefused as exc:
            if exc.transient:
                raise CatalogUnavailable(f"catalog: {exc}") from exc
            raise
        except ServerUnavailable as exc:
            raise CatalogUnavailable(str(exc)) from exc
        content = entry.get("content")
        if not isinstance(content, str):
            raise MilepostError(f"catalog entry {path}@{version} has no content")
        return load.load_text(content, source=f"{path}@{entry.get('version', version)}")
