"""`record`: the dataclass of a value made on every step (an event, a command row, a lease,
a work item, a tool call and its result): immutable to the type checker, plain slots at
run time.

A frozen dataclass sets each field through `object.__setattr__` as it is made: an event's
eleven fields cost seven times a plain slotted class's construction (1.2 us against
0.17), and one step makes a dozen such values. mypy (`make lint`, strict) refuses any
assignment to a record's field, as it does a frozen dataclass's (`frozen_default`);
equality and hashing are a frozen dataclass's (`unsafe_hash`: by the fields). What it
gives up is the error at run time of code that assigns anyway, which the type check
catches first. Build changed copies with `dataclasses.replace`, as before.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def record(cls: type[T]) -> type[T]:
    return dataclasses.dataclass(slots=True, unsafe_hash=True)(cls)
