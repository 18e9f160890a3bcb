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
_VALUE = r"[^\s\"'&;,]{3,}"
"""A value after `password=`. A masked value (`***`) may match again: it stays `***`."""
_NAMES = r"(?:password|passwd|secret|token|api_?key|access_?key)"
_NAME_TEXTS = (
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "api_key",
    "accesskey",
    "access_key",
)


def _named(sign: str) -> tuple[str, ...]:
    """The triggers of a name followed by `sign`: the prose word "token" alone runs none."""
    return tuple(name + sign for name in _NAME_TEXTS)


_RULES: tuple[tuple[tuple[str, ...], re.Pattern[str], str], ...] = (
    # the block's body; its BEGIN and END lines say what was there
    (
        ("private key",),
        re.compile(
            r"(-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----)[^*][\s\S]{2,}?"
            r"(-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)"
        ),
        rf"\1{MASK}\2",
    ),
    # a bearer token has a digit or a sign in it: "the bearer instruments" is prose; first,
    # so a token that is also a JWT or a prefixed key is masked once
    (
        ("bearer",),
        re.compile(rf"\b((?i:bearer)\s+)(?={_TOKEN_CHARS}*[0-9\-._~+/]){_TOKEN_CHARS}{{8,}}[=*]*"),
        rf"\1{MASK}",
    ),
    (
        ("eyj",),
        re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"),
        MASK,
    ),
    # the scheme starts where a run of scheme characters starts, so a scan stays linear
    (
        ("://",),
        re.compile(
            r"(?<![a-zA-Z0-9+.\-])([a-zA-Z][a-zA-Z0-9+.\-]{0,30}://[^\s:/@?#]+:)"
            r"[^\s@/?#]{3,}(?=@)"
        ),
        rf"\1{MASK}",
    ),
    (("sk-",), re.compile(rf"\b(sk-(?:proj-|ant-|live-)?){_KEY_CHARS}{{20,}}"), rf"\1{MASK}"),
    (("sk_", "rk_"), re.compile(r"\b((?:sk|rk)_(?:live|test)_)[A-Za-z0-9]{16,}"), rf"\1{MASK}"),
    (
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        re.compile(r"\b(gh[pousr]_)[A-Za-z0-9]{36,}"),
        rf"\1{MASK}",
    ),
    (("github_pat_",), re.compile(r"\b(github_pat_)[A-Za-z0-9_]{22,}"), rf"\1{MASK}"),
    (("glpat-",), re.compile(r"\b(glpat-)[A-Za-z0-9_\-]{20,}"), rf"\1{MASK}"),
    (("xox",), re.compile(r"\b(xox[abposr]-)[A-Za-z0-9\-]{10,}"), rf"\1{MASK}"),
    (("akia", "asia"), re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), rf"\1{MASK}"),
    (("aiza",), re.compile(r"\b(AIza)[0-9A-Za-z_\-]{35}"), rf"\1{MASK}"),
    # `access_token=`, `"client_secret": "`: the name may end a longer one
    (_named("="), re.compile(rf"(?i)(?<![a-z0-9])({_NAMES}=)(['\"]?){_VALUE}"), rf"\1\2{MASK}"),
    (
        _named('"'),
        re.compile(rf"(?i)(?<![a-z0-9])({_NAMES}\"\s*:\s*\")[^\"]{{3,}}(?=\")"),
        rf"\1{MASK}",
    ),
    # an environment variable: `PGPASSWORD=`, `DB_PASSWORD=` (upper case, so `mypassword=`
    # in prose is left to the pattern above)
    (
        _named("="),
        re.compile(
            rf"(?<![A-Za-z0-9_])([A-Z][A-Z0-9_]*{_NAMES.upper()}=)"
            rf"(['\"]?){_VALUE}"
        ),
        rf"\1\2{MASK}",
    ),
    (
        ("api-key:",),
        re.compile(r"(?i)(?<![a-z0-9])((?:x-)?api-key:[ \t]*)(['\"]?)[^\s\"',;]{3,}"),
        rf"\1\2{MASK}",
    ),
    # YAML `password: hunter2`: a key at the start of a line and one word to its end, so
    # `token: missing, please log in` is prose
    (
        _named(":"),
        re.compile(
            rf"(?im)^([ \t]*(?:-[ \t]+)?[a-z0-9_\-]*?{_NAMES}:[ \t]+)(['\"]?)"
            rf"[^\s'\"]{{3,}}(?=['\"]?[ \t\r]*$)"
        ),
        rf"\1\2{MASK}",
    ),
)
"""What looks like a secret, what replaces it, and the texts (lowercased) without which
it cannot match. Every replacement is at most as long as what it replaces, and masking a
masked text changes nothing."""

SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (pattern, replacement) for _, pattern, replacement in _RULES
)
_TRIGGERS = frozenset(trigger for triggers, _, _ in _RULES for trigger in triggers)
_SHORTEST = 9
"""No pattern matches fewer characters (`token=abc`)."""


def mask_patterns(text: str) -> str:
    """`text` with everything that looks like a secret (`SECRET_PATTERNS`) masked."""
    if len(text) < _SHORTEST:
        return text
    lowered = text.lower()
    present = {trigger for trigger in _TRIGGERS if trigger in lowered}
    # a replacement only inserts `***` between pieces of the text, so it brings no trigger
    # that was not there: the patterns to run are known before the first one runs
    for triggers, pattern, replacement in _RULES:
        if not present.isdisjoint(triggers):
            text = pattern.sub(replacement, text)
    return text


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
        values = sorted(
            {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LENGTH},
            key=len,
            reverse=True,
        )
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
