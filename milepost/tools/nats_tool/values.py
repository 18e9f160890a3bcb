"""How the nats tool writes a playbook's values as bytes and reads bytes back."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

JSON_TYPE = "application/json"


def encode(value: Any, encoding: str | None = None) -> tuple[bytes, bool]:
    """The bytes stored for `value`, and whether they are JSON of a mapping or list.

    Strings are stored as UTF-8 (`encoding: base64`: decoded from base64 first), mappings
    and lists as JSON, other scalars (numbers, booleans, null) as their JSON text.
    """
    if encoding not in (None, "", "utf-8", "utf8", "base64"):
        raise ValueError(f"unknown encoding {encoding!r} (known: utf-8, base64)")
    if isinstance(value, str):
        if encoding == "base64":
            try:
                return base64.b64decode(value, validate=True), False
            except binascii.Error:
                raise ValueError("`encoding: base64` but the value is not base64") from None
        return value.encode("utf-8"), False
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(), True
    return json.dumps(value).encode(), False


def decode(
    data: bytes | None, *, is_json: bool | None = None, encoding: str | None = None
) -> tuple[Any, str | None]:
    """A stored value and, when it is not text, the encoding it is given in (`base64`).

    `is_json` (known from a header): parse the text as JSON; None: parse only text that is
    a JSON object or array, so a stored string stays a string.
    """
    raw = data or b""
    if encoding == "base64":
        return base64.b64encode(raw).decode("ascii"), "base64"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"
    if is_json is False:
        return text, None
    if is_json or text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text), None
        except ValueError:
            pass
    return text, None


def text_headers(raw: Any) -> dict[str, str]:
    """A `headers` mapping as NATS headers: names and values as strings."""
    if raw is None or raw == "":
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"`headers` must be a mapping, got {type(raw).__name__}")
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
