"""Faults the engine injects into itself when told to, for `milepost verify` to find.

`MILEPOST_FAULT_SKIP_FENCE=1` (`Settings.fault_skip_fence`) makes every reported batch
skip the fence: a report from a claim that is no longer live (released, re-claimed) is
taken as the command's outcome. For testing the verify suite only: the suite must notice
it and fail. Read once per process, and said loudly, so nobody runs it by accident.
"""

from __future__ import annotations

import functools
import logging

from milepost.settings import Settings

log = logging.getLogger(__name__)


@functools.cache
def skip_fence() -> bool:
    skip = Settings().fault_skip_fence
    if skip:
        log.warning(
            "MILEPOST_FAULT_SKIP_FENCE is set: stale reports are accepted "
            "(a fault for testing `milepost verify`; never in production)"
        )
    return skip
