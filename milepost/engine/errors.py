"""What the engine service refuses, as `MilepostError`s with stable codes and fields.

A transport maps each code to its own answer (the API: 404, 409, 422 with the body it
always had); the embedded mode raises them as they are.
"""

from __future__ import annotations

from typing import Any

from milepost.errors import MilepostError

Problem = dict[str, Any]
"""`{"loc": [...], "msg": str}`. A `loc` that starts with an int starts with the index of
the event in the batch it was given; the transport says where that batch came from."""


class EventsInvalid(MilepostError):
    """The events are invalid."""

    code = "events_invalid"

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        first = problems[0] if problems else {"loc": [], "msg": "invalid"}
        super().__init__(str(first["msg"]), problems=problems)


class CommandNotFound(MilepostError):
    """No command with that id."""

    code = "command_not_found"


class ExecutionTerminal(MilepostError):
    """The execution has ended: it takes no more events."""

    code = "execution_terminal"


class AlreadyTerminal(MilepostError):
    """The execution has ended already: there is nothing left to cancel."""

    code = "already_terminal"


def command_not_found(command_id: int) -> CommandNotFound:
    return CommandNotFound(f"no command {command_id}", command_id=str(command_id))
