"""Wire shapes of the workers registry: what a worker says of itself when it checks in
(`worker` of `POST /api/workers/machine-id`) and the list `GET /api/workers` answers."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from milepost.api import checks
from milepost.api.checks import IdOut, StrictIn, TimeOut
from milepost.engine import workers

POOL_PATTERN = r"^[A-Za-z0-9_.-]{1,100}$"
WorkerStatus = Literal["live", "lost"]


class WorkerIn(StrictIn):
    """The worker's own description, sent with each check-in (all optional: a worker that
    sends none is listed by the id it leases its machine id as)."""

    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The worker id its claims carry (`MILEPOST_WORKER_ID`, default `host:pid`).",
        json_schema_extra=checks.NO_NUL,
    )
    host: str = Field(default="", max_length=255, json_schema_extra=checks.NO_NUL)
    pid: int | None = Field(default=None, ge=0, le=2**31 - 1)
    version: str = Field(default="", max_length=100, json_schema_extra=checks.NO_NUL)
    ttl: float = Field(
        default=workers.LEASE_TTL_S,
        ge=1,
        le=86400,
        description="Seconds without a check-in after which it is lost (the "
        "worker's lease seconds; it checks in every third of it).",
    )

    def check_in(self, worker_key: str, pool: str, owner: str | None) -> workers.CheckIn:
        """`owner`: the token (hash) it checks in with."""
        name = self.name or worker_key.rpartition("/")[0] or worker_key
        return workers.CheckIn(
            worker_key,
            name,
            pool,
            workers.WORKER,
            self.host,
            self.pid,
            self.version,
            self.ttl,
            owner,
        )


class RunningOut(BaseModel):
    command_id: IdOut
    execution_id: IdOut
    step: str


class WorkerOut(BaseModel):
    name: str
    """The worker id its claims carry."""
    worker_key: str
    """The process (unique per process, where names may be shared or reused)."""
    kind: Literal["worker", "embedded"]
    pools: list[str]
    host: str
    pid: int | None
    version: str
    started_at: TimeOut | None
    last_seen: TimeOut | None
    ttl: float
    status: WorkerStatus
    """`lost`: not seen for `ttl` seconds; its commands recover as their leases expire."""
    lost_at: TimeOut | None = None
    running: list[RunningOut]
    """The commands its name holds a claim on now."""


class NoLiveWorkerOut(BaseModel):
    """Commands queued in a pool that no live worker serves (DSL 10.6)."""

    pool: str
    commands: int
    steps: list[str]
    message: str = Field(description="`no live worker of pool <pool>`.")


class WorkerList(BaseModel):
    items: list[WorkerOut]
    without_worker: list[NoLiveWorkerOut] = Field(
        default_factory=list,
        description=(
            "The pools with queued commands (of every run) that no live worker serves: what "
            "waits for a worker nobody started (`engine.worker_pools`)."
        ),
    )


def worker_out(worker: workers.RegisteredWorker) -> WorkerOut:
    row = worker.row
    return WorkerOut(
        name=row.name,
        worker_key=row.worker_key,
        kind="embedded" if row.kind == workers.EMBEDDED else "worker",
        pools=[row.pool],
        host=row.host,
        pid=row.pid,
        version=row.version,
        started_at=checks.iso(row.started_at),
        last_seen=checks.iso(row.last_seen),
        ttl=row.ttl,
        status="live" if worker.status == workers.LIVE else "lost",
        lost_at=checks.iso(row.lost_at),
        running=[
            RunningOut(command_id=str(c.command_id), execution_id=str(c.execution_id), step=c.step)
            for c in worker.running
        ],
    )
