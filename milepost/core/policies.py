"""Small pure policies shared by decide (spec.retry) and the attempt runner (task policy
retries). Durations are parsed once, strictly, by `playbook.durations`."""

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

