"""Snowflake ids from a clock that is passed in.

Layout (63 bits, positive in a signed BIGINT): 41 bits of milliseconds since the
milepost epoch, 10 bits of machine id, 12 bits of sequence. Ids are monotonic within
one generator even when the clock steps backwards (we keep using the last timestamp)
or when more than 4096 ids are asked for in one millisecond (we borrow the next one).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

EPOCH_MS = 1_700_000_000_000  # 2023-11-14; keeps ids small for decades
MACHINE_BITS = 10
SEQUENCE_BITS = 12
MAX_MACHINE = (1 << MACHINE_BITS) - 1
MAX_SEQUENCE = (1 << SEQUENCE_BITS) - 1
MAX_ID = (1 << 63) - 1
"""The largest id: a positive signed 64-bit integer (PostgreSQL's BIGINT)."""


class Snowflake:
    """Generates ids; `clock` returns seconds since the epoch (float)."""

    def __init__(self, machine_id: int, clock: Callable[[], float]) -> None:
        if not 0 <= machine_id <= MAX_MACHINE:
            raise ValueError(f"machine id must be in 0..{MAX_MACHINE}, got {machine_id}")
        self._machine = machine_id
        self.machine_id = machine_id
        self._clock = clock
        self._last_ms = 0
        self._seq = 0

    def __call__(self) -> int:
        now_ms = max(int(self._clock() * 1000) - EPOCH_MS, self._last_ms)
        if now_ms == self._last_ms:
            self._seq += 1
            if self._seq > MAX_SEQUENCE:
                now_ms += 1
                self._seq = 0
        else:
            self._seq = 0
        self._last_ms = now_ms
        return (
            (now_ms << (MACHINE_BITS + SEQUENCE_BITS))
            | (self._machine << SEQUENCE_BITS)
            | self._seq
        )

    def block(self, n: int) -> int:
        """The first of `n` consecutive ids (first .. first + n - 1), none of which this
        generator hands out again: a statement that needs up to `n` ids takes one number
        instead of a list. At most a millisecond's worth (4,096)."""
        if not 1 <= n <= MAX_SEQUENCE + 1:
            raise ValueError(f"a block holds 1 to {MAX_SEQUENCE + 1} ids, not {n}")
        now_ms = max(int(self._clock() * 1000) - EPOCH_MS, self._last_ms)
        start = self._seq + 1 if now_ms == self._last_ms else 0
        if start + n - 1 > MAX_SEQUENCE:  # the rest of this millisecond is too short
            now_ms, start = now_ms + 1, 0
        self._last_ms, self._seq = now_ms, start + n - 1
        return (now_ms << (MACHINE_BITS + SEQUENCE_BITS)) | (self._machine << SEQUENCE_BITS) | start


def block_of(new_id: Callable[[], int], n: int) -> int | None:
    """The first of `n` consecutive ids from a generator that reserves blocks (`block`,
    as `Snowflake`); None from one that does not (the caller mints them one by one)."""
    block = getattr(new_id, "block", None)
    return None if block is None else int(block(n))


def machine_of(snowflake_id: int) -> int:
    """The machine id a snowflake was minted with."""
    return (snowflake_id >> SEQUENCE_BITS) & MAX_MACHINE


def timestamp_of(snowflake_id: int) -> float:
    """Seconds since the epoch at which an id was generated."""
    return ((snowflake_id >> (MACHINE_BITS + SEQUENCE_BITS)) + EPOCH_MS) / 1000.0


def idempotency_key(execution_id: int, step: str, run: int, index: int | None, attempt: int) -> str:
    """DSL 10.4: stable for one step run and loop index, distinct per attempt."""
    idx = "-" if index is None else str(index)
    return hashlib.sha256(f"{execution_id}:{step}:{run}:{idx}:{attempt}".encode()).hexdigest()


def operation_key(execution_id: int, step: str, run: int, index: int | None) -> str:
    """DSL 10.4: the same for every attempt of one step run and loop index (a retry, a
    re-issue after a lost worker), for systems that must do the operation once."""
    idx = "-" if index is None else str(index)
    return hashlib.sha256(f"{execution_id}:{step}:{run}:{idx}".encode()).hexdigest()


def parse_id(value: Any) -> int:
    """A snowflake from a JSON integer or a string of digits; ValueError names what is wrong."""
    if isinstance(value, bool):
        raise ValueError("an id is an integer or a string of digits, not a boolean")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdigit():
        # ASCII only: int() also reads "١٢" (Arabic-Indic) and " 12 "
        number = int(value)
    else:
        raise ValueError("an id is an integer or a string of digits")
    if not 0 < number <= MAX_ID:
        raise ValueError("an id is a positive 64-bit integer")
    return number


def as_id(value: Any) -> int | None:
    """`parse_id`, None for what is not an id."""
    try:
        return parse_id(value)
    except ValueError:
        return None
