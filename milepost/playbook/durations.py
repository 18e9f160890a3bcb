"""Durations: `30s`, `5m`, `2h`, `1d`, `500ms`, `1h30m` or plain seconds.

The one parser of durations in milepost, and a strict one: `1e3`, `inf`, `nan`, `-5s`,
`5 minutes` and booleans are refused, since a playbook that says one of them meant
something else than any number we could read from it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from milepost.playbook import problems

_DURATION_RE = re.compile(r"(?:\d+(?:\.\d+)?\s*(?:ms|s|m|h|d)\s*)+")
_DURATION_PART_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_NUMBER_RE = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_SECONDS_PER = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any, where: str = "") -> float:
    """Seconds in `value`: `30s`, `5m`, `2h`, `1d`, `500ms`, `1h30m`, or a plain number.

    Raises:
        ValueError: `"<where>: invalid duration ..."` when `value` is not a duration.
    """
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if _NUMBER_RE.fullmatch(text):
            seconds = float(text)
        elif _DURATION_RE.fullmatch(text):
            seconds = sum(
                float(n) * _SECONDS_PER[unit] for n, unit in _DURATION_PART_RE.findall(text)
            )
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        prefix = f"{where}: " if where else ""
        raise ValueError(
            f"{prefix}invalid duration {value!r} "
            "(expected e.g. 30s, 5m, 2h, 1d or a number of seconds)"
        )
    return seconds


def check(raw: Any, w: problems.Where, *, positive: bool = True) -> float | None:
    """`raw` in seconds, or None after reporting why it is not a (positive) duration."""
    try:
        seconds = parse_duration(raw, "")
    except ValueError as exc:
        w.error(str(exc))
        return None
    if positive and seconds <= 0:
        w.error(f"must be greater than 0, got {raw!r}")
        return None
    return seconds


def text(raw: Any) -> str:
    """A duration as the user wrote it, for messages (a bare number gets an `s`)."""
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return f"{raw:g}s"
    return str(raw)


def span(seconds: float) -> str:
    """A length of time as people read it, to the second below: `12s`, `4m 10s`,
    `3h 05m`, `2d 1h` (a negative one reads `0s`)."""
    left = max(int(seconds), 0)
    days, rest = divmod(left, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"
