"""A loop step's result, as the fold keeps it and templates read it (DSL 3.2, 9.2)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, SupportsIndex, overload


class LoopResult(list[Any]):
    """A loop step's result: the list of per-iteration results, also answering .results/.data
    (the list itself), .stats ({total, success, failed}), .get("results"|"data"|"stats",
    default) and x["results"|"data"|"stats"] (string keys only; integer indexing works as a
    list). Picklable (it is sent to worker processes) and json.dumps-able as a plain list.

    Both upstream NoETL engines shaped loop results differently (a bare list vs. a
    `{results, stats}` mapping); answering both ways lets fixtures written for either work.
    """

    __slots__ = ("failed",)

    _KEYS = frozenset({"results", "data", "stats"})

    def __init__(self, items: Iterable[Any] = (), failed: int = 0) -> None:
        super().__init__(items)
        # Iterations whose error a policy let through (counted, not dropped).
        self.failed = failed

    @property
    def results(self) -> LoopResult:
        return self

    @property
    def data(self) -> LoopResult:
        return self

    @property
    def stats(self) -> dict[str, int]:
        total = len(self)
        return {"total": total, "success": total - self.failed, "failed": self.failed}

    def get(self, key: object, default: Any = None) -> Any:
        if isinstance(key, str) and key in self._KEYS:
            return self.stats if key == "stats" else self
        return default

    @overload
    def __getitem__(self, key: SupportsIndex, /) -> Any: ...

    @overload
    def __getitem__(self, key: slice, /) -> list[Any]: ...

    @overload
    def __getitem__(self, key: str, /) -> Any: ...

    def __getitem__(self, key: SupportsIndex | slice | str, /) -> Any:
        if isinstance(key, str):
            if key in self._KEYS:
                return self.stats if key == "stats" else self
            # KeyError (a LookupError) lets Jinja's getitem fall back as for any container.
            raise KeyError(key)
        return super().__getitem__(key)

    def __reduce__(self) -> tuple[Any, ...]:
        # Explicit so pickling/copying never depends on how list subclasses with
        # __slots__ are reduced, and `failed` always survives the trip to a worker.
        return (LoopResult, (list(self), self.failed))

    def __repr__(self) -> str:
        return f"LoopResult({list.__repr__(self)}, failed={self.failed})"
