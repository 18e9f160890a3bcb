"""Small pure policies shared by decide (spec.retry of steps and of compensations) and the
attempt runner (task policy retries). Durations are parsed once, strictly, by
`playbook.durations`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from milepost.playbook.model import RetrySpec

LOST_ATTEMPTS = 3
"""Attempts a command gets when its worker vanished (error kind `lost`) and its step has no
`spec.retry`: losing a worker is the infrastructure's fault, not the step's (nor a
compensation's)."""


def retry_delay(
    backoff: str, delay: float, failed_attempt: int, max_delay: float | None = None
) -> float:
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


def retryable(spec: RetrySpec | None, kind: Any, failed_attempt: int) -> bool:
    """Whether `spec.retry` retries an attempt that failed with error `kind`; without a
    `spec.retry`, only a lost worker's attempt is (`LOST_ATTEMPTS`)."""
    if spec is None:
        return kind == "lost" and failed_attempt < LOST_ATTEMPTS
    return kind in spec.retry_on and failed_attempt < spec.max_attempts


def retry_wait(spec: RetrySpec | None, failed_attempt: int, error: Mapping[str, Any]) -> float:
    """Seconds before the retry of `failed_attempt`: the spec's backoff, and never less than
    the `retry_after` its error asked for (a 429's, a 503's)."""
    wait = retry_delay(spec.backoff, spec.delay, failed_attempt, spec.max_delay) if spec else 0.0
    return max(wait, float(error.get("retry_after") or 0.0))
