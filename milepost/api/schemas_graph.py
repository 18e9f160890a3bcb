"""The wire shape of a run's step graph (`GET /api/executions/{id}/graph`, the web UI's
run page) and of the caller's identity (`GET /api/whoami`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from milepost.api.checks import IdOut
from milepost.api.schemas_diagnosis import WaitOut


class IterationsOut(BaseModel):
    total: int
    done: int
    running: int
    failed: int


class NodeOut(BaseModel):
    id: str = Field(description="The step's name.")
    desc: str | None
    kind: str = Field(description="Its tasks' tool kinds, comma-separated.")
    tasks: int
    loop: bool
    status: str = Field(description="The step's status; PENDING before it first starts.")
    runs: int = Field(description="How many times the step started.")
    iterations: IterationsOut | None = Field(
        description=(
            "A loop step's latest run: iterations done, running and failed; null without a loop."
        )
    )
    teardown: bool = Field(
        False,
        description=(
            "A teardown step (`executor.spec.teardown`): no arc reaches it; it runs once as "
            "the run ends, whatever the end."
        ),
    )
    wait: WaitOut | None = Field(
        None, description="What the step waits on first (`waits` of its status), if anything."
    )


class EdgeOut(BaseModel):
    id: str
    source: str
    target: str
    kind: str = Field(description="`next` (an arc) or `compensation`.")
    conditional: bool = Field(description="The arc has a `when`.")


class GraphOut(BaseModel):
    execution_id: IdOut
    status: str
    entry_step: str
    nodes: list[NodeOut]
    edges: list[EdgeOut]


class WhoamiOut(BaseModel):
    role: str
    name: str | None
    user: str | None
    may: dict[str, bool] = Field(
        description=(
            "What the token's role may do: `cancel`, `execute`, `act` (retry, skip, restart), "
            "`approve`; the web UI offers only these."
        )
    )
