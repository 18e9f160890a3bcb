"""Small pure policies shared by decide (spec.retry) and the worker (task policy retries)."""

from __future__ import annotations


def retry_delay(backoff: str, delay: float, failed_attempt: int, max_delay: float | None = None) -> float:
    """Seconds to wait before retry n = `failed_attempt` (DSL 5): fixed, linear, exponential, none."""
    n = max(1, failed_attempt)
    if backoff == "fixed":
        wait = delay
    elif backoff == "linear":
        wait = delay * n
    elif backoff == "exponential":
        wait = delay * (2 ** (n - 1))
    else:
        wait = 0.0
    if max_delay is not None:
        wait = min(wait, max_delay)
    return max(0.0, wait)


def parse_duration(value: object) -> float:
    """`30s`, `5m`, `2h`, `1d`, `250ms` or plain seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip().lower()
    units = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0), ("d", 86400.0))
    for suffix, factor in units:
        if text.endswith(suffix):
            number = text[: -len(suffix)].strip()
            try:
                return float(number) * factor
            except ValueError:
                break
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"invalid duration {value!r} (use e.g. 30s, 5m, 2h, 1d)") from None
