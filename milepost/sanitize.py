"""Secret redaction, applied before anything leaves the worker (events, results, logs).

Every string value a run resolved as a secret (keychain values, credential fields) is
replaced wherever it appears, inside larger strings too. `is_sensitive_key` names the
keys (`password`, `token`, ...) whose values are never shown, for logs and settings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

MASK = "***"
MIN_SECRET_LENGTH = 4
"""Shorter values would mask innocent text everywhere (a password of "1" is not a secret)."""

_SENSITIVE_KEY = re.compile(
    r"(^|_|-)(password|passwd|secret|token|api_?key|authorization|private_?key|credentials?)$",
    re.IGNORECASE,
)


def is_sensitive_key(key: str) -> bool:
    return bool(_SENSITIVE_KEY.search(key))


class Redactor:
    """Replaces known secret values wherever they appear."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted({s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LENGTH},
                        key=len, reverse=True)  # fmt: skip
        self._pattern = re.compile("|".join(map(re.escape, values))) if values else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, value: str) -> str:
        return self._pattern.sub(MASK, value) if self._pattern else value

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


def secret_strings(value: Any) -> list[str]:
    """Every string inside a resolved secret (a credential's fields, a keychain entry)."""
    return list(strings_in(value))


def strings_in(value: Any) -> Iterator[str]:
    """Every string in `value`, walking the values of mappings and the items of lists."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_in(item)
