"""A worker whose token the server refuses stops, with exit code 2, instead of retrying.

A 401 (no token, an unknown or revoked one) or a 403 of the auth layer (a token whose role
may not claim) will not pass by retrying: at the start (its machine-id lease, its first
claim) or later (a claim, a heartbeat, a report, a renewal: the token revoked), the worker
ends and says which setting to fix (`worker.main` turns this into the exit code).
"""

from __future__ import annotations

from collections.abc import Callable

from milepost.client import ServerRefused
from milepost.errors import MilepostError

_AUTH_CODES = frozenset({"unauthorized", "forbidden"})
"""The codes of `api.auth`'s refusals (a 403 of another code is about one request: a child
run of a command the worker does not hold)."""


class TokenRefused(MilepostError):
    """The server refused the worker's token."""

    code = "token_refused"

    def __init__(self, cause: ServerRefused) -> None:
        fix = (
            "set MILEPOST_TOKEN to a token of role worker (`milepost token create --role "
            "worker`) and start the worker again"
        )
        super().__init__(
            f"the server refused the worker's token (HTTP {cause.status} "
            f"{cause.code}: {cause.message}): {fix}",
            status=cause.status,
            cause_code=cause.code,
        )


def refused(exc: BaseException) -> TokenRefused | None:
    """`exc` as a TokenRefused when it is the server refusing the token, else None."""
    if isinstance(exc, TokenRefused):
        return exc
    if isinstance(exc, ServerRefused) and exc.status in (401, 403) and exc.code in _AUTH_CODES:
        return TokenRefused(exc)
    return None


class Watch:
    """Called with a failure of a request: True when it is a refused token, which stops
    the worker (`stop`: nothing it does could be reported any more; its leases lapse and
    their commands recover) the first time."""

    def __init__(self, stop: Callable[[], None]) -> None:
        self.stop = stop
        self.refused: TokenRefused | None = None

    def __call__(self, exc: BaseException) -> bool:
        found = refused(exc)
        if found is not None and self.refused is None:
            self.refused = found
            self.stop()
        return found is not None

    def raise_refused(self) -> None:
        if self.refused is not None:
            raise self.refused
