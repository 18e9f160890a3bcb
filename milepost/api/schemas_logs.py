"""The wire shapes of attempt logs (`core.logs`): the `logs` a report event carries, and
`GET /api/executions/{id}/logs`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from milepost.api.checks import Checked, IdOut, TimeOut
from milepost.ids import MAX_ID

Stream = Literal["stdout", "stderr", "traceback"]


class LogIn(Checked):
    """One stream a report's attempt captured (redacted and capped by its worker)."""

    stream: Stream
    text: str
    cut: int = Field(default=0, ge=0, le=MAX_ID, description="Bytes cut from its middle.")


class LogEntryOut(BaseModel):
    cursor: int = Field(description="Pass the last one as `after` to read what follows.")
    step: str
    command_id: IdOut
    attempt: int
    stream: Stream
    text: str
    cut: int
    created_at: TimeOut


class LogsOut(BaseModel):
    execution_id: IdOut
    status: str = Field(
        description="The run's status when the entries were read: a "
        "follower stops after a page read with it terminal."
    )
    entries: list[LogEntryOut]
    next: int = Field(description="The cursor to pass as `after` next time.")
