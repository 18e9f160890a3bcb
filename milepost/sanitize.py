"""Secret redaction, applied before anything leaves the worker (events, results, logs).

Every string value a run resolved as a secret (keychain values, the secret fields of
credentials) is replaced wherever it appears, inside larger strings too. Text that looks
like a secret (`SECRET_PATTERNS`: bearer tokens, JWTs, well-known key prefixes, private
key blocks, passwords in URLs) is masked too, declared or not: only the secret part, so
`Authorization: Bearer ***` still says what it was. `is_sensitive_key` names the keys
(`password`, `token`, ...) whose values are never shown (`mask_keys`).
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


_KEY_CHARS = r"[A-Za-z0-9_\-]"
_TOKEN_CHARS = r"[A-Za-z0-9\-._~+/]"
_VALUE = r"[^\s\"'&;,*]{3,}"
"""A value after `password=`: `*` excluded so a masked value is not masked again."""
_NAMES = r"(?:password|passwd|secret|token|api_?key|access_?key)"

SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # the block's body; its BEGIN and END lines say what was there
    (re.compile(r"(-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----)[^*][\s\S]{2,}?"
                r"(-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)"), rf"\1{MASK}\2"),
    # a bearer token has a digit or a sign in it: "the bearer instruments" is prose; first,
    # so a token that is also a JWT or a prefixed key is masked once
    (re.compile(rf"\b([Bb]earer\s+)(?={_TOKEN_CHARS}*[0-9\-._~+/]){_TOKEN_CHARS}{{8,}}[=*]*"),
     rf"\1{MASK}"),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"), MASK),
    # the scheme starts where a run of scheme characters starts, so a scan stays linear
    (re.compile(r"(?<![a-zA-Z0-9+.\-])([a-zA-Z][a-zA-Z0-9+.\-]{0,30}://[^\s:/@?#]+:)"
                r"[^\s@/?#*]{3,}(?=@)"), rf"\1{MASK}"),
    (re.compile(rf"\b(sk-(?:proj-|ant-|live-)?){_KEY_CHARS}{{20,}}"), rf"\1{MASK}"),
    (re.compile(r"\b((?:sk|rk)_(?:live|test)_)[A-Za-z0-9]{16,}"), rf"\1{MASK}"),
    (re.compile(r"\b(gh[pousr]_)[A-Za-z0-9]{36,}"), rf"\1{MASK}"),
    (re.compile(r"\b(github_pat_)[A-Za-z0-9_]{22,}"), rf"\1{MASK}"),
    (re.compile(r"\b(glpat-)[A-Za-z0-9_\-]{20,}"), rf"\1{MASK}"),
    (re.compile(r"\b(xox[abposr]-)[A-Za-z0-9\-]{10,}"), rf"\1{MASK}"),
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), rf"\1{MASK}"),
    (re.compile(r"\b(AIza)[0-9A-Za-z_\-]{35}"), rf"\1{MASK}"),
    # `access_token=`, `"client_secret": "`: the name may end a longer one
    (re.compile(rf"(?i)(?<![a-z0-9])({_NAMES}=)(['\"]?){_VALUE}"), rf"\1\2{MASK}"),
    (re.compile(rf"(?i)(?<![a-z0-9])({_NAMES}\"\s*:\s*\")[^\"*]{{3,}}(?=\")"), rf"\1{MASK}"),
)  # fmt: skip
"""What looks like a secret, and what replaces it. Every replacement is at most as long
as what it replaces, and a masked text matches no pattern again."""


_TRIGGERS = ("private key", "bearer", "eyj", "://", "sk-", "sk_", "rk_", "ghp_", "gho_", "ghu_",
             "ghs_", "ghr_", "github_pat_", "glpat-", "xox", "akia", "asia", "aiza", "password",
             "passwd", "secret", "token", "key")  # fmt: skip
"""A text holding none of these (lowercased) matches no pattern: most results and log
lines are checked with a few substring tests instead of every pattern."""
_SHORTEST = 9
"""No pattern matches fewer characters (`a://b:ccc@`)."""


def mask_patterns(text: str) -> str:
    """`text` with everything that looks like a secret (`SECRET_PATTERNS`) masked."""
    if len(text) < _SHORTEST:
        return text
    lowered = text.lower()
    if not any(trigger in lowered for trigger in _TRIGGERS):
        return text
    return _mask_all(text)


def _mask_all(text: str) -> str:
    for pattern, replacement in SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def mask_keys(value: Any) -> Any:
    """Values under sensitive keys (`password`, `token`, ...) replaced, at any depth."""
    if isinstance(value, dict):
        return {k: MASK if _masked_key(k, v) else mask_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_keys(v) for v in value]
    return value


def mask(value: Any) -> Any:
    """`mask_keys` and `mask_patterns` in one walk: what a value from outside the worker's
    redaction (a client's event, a start request's workload) gets before it is stored."""
    if isinstance(value, str):
        return mask_patterns(value)
    if isinstance(value, dict):
        return {k: MASK if _masked_key(k, v) else mask(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask(v) for v in value]
    return value


def sensitive_values(value: Any) -> list[str]:
    """The strings `mask_keys` would hide: every string under a sensitive key."""
    found: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and is_sensitive_key(key):
                found.extend(strings_in(item))
            else:
                found.extend(sensitive_values(item))
    elif isinstance(value, list | tuple):
        for item in value:
            found.extend(sensitive_values(item))
    return found


def _masked_key(key: Any, value: Any) -> bool:
    return isinstance(key, str) and is_sensitive_key(key) and value not in (None, "")


class Redactor:
    """Replaces known secret values wherever they appear, and what looks like a secret
    (`mask_patterns`) even when nobody declared it."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted({s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LENGTH},
                        key=len, reverse=True)  # fmt: skip
        self._pattern = re.compile("|".join(map(re.escape, values))) if values else None

    def __bool__(self) -> bool:
        """Whether it knows secret values (the patterns apply either way)."""
        return self._pattern is not None

    def text(self, value: str) -> str:
        return mask_patterns(self._pattern.sub(MASK, value) if self._pattern else value)

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
