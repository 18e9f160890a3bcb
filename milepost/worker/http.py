"""The distributed worker: claims commands from the server over HTTP, runs, reports.

One `Worker` runs up to `concurrency` attempts at once on one event loop:

- **claiming**: `POST /api/commands/claim` for the free slots; when nothing comes back it
  waits 0.05 s, doubling to 2 s, and back to 0.05 s once work arrives. A NATS notice
  (`nats_wakeup`), a finished attempt or a shutdown cuts the wait short. NATS is a
  hint, the server's queue is the truth.
- **running**: the playbook is fetched once per (path, version); the `WorkItem` is
  rebuilt from the claim (loop results wrapped in `LoopResult` again); `run_attempt`
  runs it. Credentials come from the server (`remote_credentials`), fetched before the
  attempt and cached briefly; the tools and the keychain read them from that cache.
- **leases**: a heartbeat every lease/3 while a command is held. A heartbeat refused
  with 409/404 means the lease is lost: the attempt is abandoned and never reported (the
  server has re-issued it). `cancelled: true` lets the attempt finish but no more of
  that execution's commands are taken.
- **reporting**: attempts that finish while a report is on its way go together in the
  next `POST /api/events/batch` (each event carries its lease epoch), and that request
  also claims the commands for the slots it frees (`claim`): the server answers with the
  next commands, claimed in the transaction that stored the reports, so a chain of steps
  costs one round trip per step. Retried while the server is unreachable (event ids make
  the retry idempotent; a retry claims nothing, since the first try may have).
- **shutdown** (`stop()`, SIGTERM/SIGINT): stop claiming, give back claimed commands not
  yet started, let running attempts finish within `grace_seconds`, then cancel the rest
  unreported (their leases expire and the server re-issues them).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from milepost.attempt import runner as attempt_mod
from milepost.client import AsyncMilepostClient, MilepostClient, ServerRefused, ServerUnavailable
from milepost.core import events as ev
from milepost.core.ids import Snowflake
from milepost.core.work import AttemptResult, WorkItem, report_events
from milepost.engine.machine import LEASE_TTL_S, RENEW_EVERY_S
from milepost.errors import MilepostError
from milepost.playbook import load, model
from milepost.playbook.loop_result import LoopResult
from milepost.settings import Settings
from milepost.tools.runtime import ToolRuntime
from milepost.worker import remote_credentials
from milepost.worker.channel import ChannelClient
from milepost.worker.children import ServerChildren
from milepost.worker.nats_wakeup import NatsWakeup, Notice
from milepost.worker.remote_credentials import RemoteCredentials

log = logging.getLogger(__name__)

MIN_POLL = 0.05
MAX_POLL = 2.0
REPORT_RETRY_FIRST = 0.2
REPORT_RETRY_MAX = 5.0
REPORT_TIMEOUT = 120.0
"""Seconds a report is retried while the server is unreachable; after that the lease
has long expired and the command was re-issued, so the report would change nothing."""
PLAYBOOK_CACHE = 256
CANCELLED_MEMORY = 10_000
CREDENTIAL_FETCH_TIMEOUT = 5.0
"""A credential not foreseen is fetched blocking the loop: keep that short."""
MAX_CLAIM = 100
"""The server's cap on `limit` of one claim."""
_LOST_CODES = frozenset({"stale_epoch", "already_terminal", "active_claim", "command_not_found",
                         "not_found"})  # fmt: skip


class WorkerClient(Protocol):
    """What the worker needs of the server (`AsyncMilepostClient`, or a fake in tests)."""

    async def claim_next(self, worker_id: str, limit: int = 1,
                         lease_seconds: float | None = None,
                         pool: str | None = None) -> list[dict[str, Any]]: ...  # fmt: skip

    async def heartbeat(self, event_id: int | str, worker_id: str, epoch: int,
                        lease_seconds: float | None = None) -> dict[str, Any]: ...  # fmt: skip

    async def release(self, event_id: int | str, worker_id: str, epoch: int) -> dict[str, Any]: ...

    async def machine_id(self, worker_id: str,
                         machine_id: int | None = None) -> dict[str, Any]: ...  # fmt: skip

    async def post_events(self, events: list[dict[str, Any]],
                          claim: dict[str, Any] | None = None) -> dict[str, Any]: ...

    async def resource(self, path: str, version: int | None = None) -> dict[str, Any]: ...

    async def credential(self, name: str) -> dict[str, Any] | None: ...


class Clock(Protocol):
    """Wall time for events, and the sleeps of polling, heartbeats and the grace period."""

    def time(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class MachineIdRefused(MilepostError):
    """The server refused to lease a machine id, in a way that retrying will not change."""

    code = "machine_id_refused"

    def __init__(self, cause: ServerRefused) -> None:
        super().__init__(f"the server refused a machine id (HTTP {cause.status} {cause.code}: "
                         f"{cause.message}); check the worker's token role and that the server "
                         "is as new as the worker", status=cause.status, cause_code=cause.code)


class _Transient(Exception):
    """A server call failed in a way that may pass: give the command back."""


def machine_id() -> int | None:
    """`MILEPOST_MACHINE_ID`, else None: the worker leases one from its server as it starts
    (an id derived from host and pid collided between workers, silently)."""
    return Settings().machine_id


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# --------------------------------------------------------------------------------------------
# Commands in, events out


def work_item(command: Mapping[str, Any]) -> WorkItem:
    """The `WorkItem` of a claimed command (contract: "The command, as returned by claim")."""
    context: dict[str, Any] = dict(command.get("context") or {})
    for name, info in (command.get("loop_steps") or {}).items():
        value = context.get(name)
        if isinstance(value, list) and not isinstance(value, LoopResult):
            failed = int(info.get("failed", 0)) if isinstance(info, Mapping) else 0
            context[name] = LoopResult(value, failed=failed)
    execution_id = int(command["execution_id"])
    context.setdefault("workload", {})
    context.setdefault("ctx", {})
    context.setdefault("iter", {})
    context.setdefault("execution_id", str(execution_id))
    lease = command.get("lease") or {}
    return WorkItem(
        command_id=int(command.get("command_id") or command["event_id"]),
        execution_id=execution_id,
        step=str(command["step"]),
        run=int(command.get("run", 1)),
        index=int(command.get("index", -1)),
        attempt=int(command.get("attempt", 1)),
        idempotency_key=str(command.get("idempotency_key") or ""),
        context=context,
        args=dict(command.get("args") or {}),
        epoch=int(lease.get("epoch", 0)),
    )


def wire_event(event: ev.Event, epoch: int, parent_event_id: int | None = None) -> dict[str, Any]:
    """An event in the wire shape of `POST /api/events/batch`, fenced by `meta.epoch`."""
    return {
        "event_id": str(event.event_id),
        "execution_id": str(event.execution_id),
        "parent_event_id": None if parent_event_id is None else str(parent_event_id),
        "event_type": event.event_type,
        "step": event.step,
        "status": event.status,
        "result": event.envelope_result(),
        "meta": {**event.meta, "epoch": epoch},
        "worker_id": event.worker_id,
        "created_at": event.created_at,
    }


def _jsonable(value: Any) -> Any:
    """`value` as JSON will carry it: what is not JSON becomes its `str` (as the stores do)."""
    return json.loads(json.dumps(value, default=str))


# --------------------------------------------------------------------------------------------
# The worker


@dataclass(slots=True, eq=False)
class _Job:
    """One claimed command, from the claim to its report."""

    command: dict[str, Any]
    command_id: int
    execution_id: int
    epoch: int
    step: str
    phase: str = "claimed"
    """claimed (not started; released on shutdown) -> running -> reporting."""
    lost: bool = False
    """The lease was lost: abandon, never report."""
    refilled: bool = False
    """Its report claimed the next commands: the claim loop need not poll for its slot."""
    task: asyncio.Task[None] | None = None


@dataclass(slots=True, eq=False)
class _Report:
    """One attempt's events waiting for the reporter, and who waits for them to go."""

    job: _Job
    outcome: AttemptResult
    wire: list[dict[str, Any]]
    sent: asyncio.Future[None]
    reminted: bool = False
    """Its ids were minted again after an `event_id_conflict`."""


class Worker:
    """Claims, runs and reports commands until `stop()`; see the module docstring.

    Args:
        client: the server (`AsyncMilepostClient`).
        tools: runs tool calls (`ToolRuntime`); not closed by the worker.
        concurrency: attempts run at once.
        pool: the pool whose commands this worker takes.
        worker_id: the name the server records; default `host:pid`.
        lease_seconds: lease asked for at claim and at each heartbeat (every third of it).
        grace_seconds: how long running attempts may take to finish after `stop()`.
        clock: time and sleeps (tests pass a fake one).
        new_id: event ids; default a Snowflake on `machine_id()`, else on a machine id
            leased from the server when `run` starts and renewed while it runs.
        min_poll, max_poll: the polling back-off.
        report_timeout: how long a report is retried while the server is unreachable.
        credentials: the lookup given to `run_attempt` (pass the same to the tools);
            default: fetched through `client`, cached for 30 s.
    """

    def __init__(
        self,
        client: WorkerClient,
        tools: attempt_mod.ToolRunner,
        *,
        concurrency: int = 4,
        pool: str = "default",
        worker_id: str | None = None,
        lease_seconds: float = 30.0,
        grace_seconds: float = 30.0,
        clock: Clock | None = None,
        new_id: Callable[[], int] | None = None,
        min_poll: float = MIN_POLL,
        max_poll: float = MAX_POLL,
        report_timeout: float = REPORT_TIMEOUT,
        credentials: RemoteCredentials | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.client = client
        self.tools = tools
        self.concurrency = concurrency
        self.pool = pool
        self.worker_id = worker_id or default_worker_id()
        self.lease_seconds = lease_seconds
        self.grace_seconds = grace_seconds
        self.clock: Clock = clock or RealClock()
        fixed = machine_id()
        self._new_id: Callable[[], int] | None = new_id or (
            None if fixed is None else Snowflake(fixed, self.clock.time))  # fmt: skip
        self._leased: int | None = None
        """The machine id leased from the server (None: `new_id` or the environment's)."""
        self._clock_offset = 0.0
        """The server's clock minus this one, as the last lease reply showed it."""
        self._lease_holder = f"{self.worker_id}/{secrets.token_hex(4)}"
        """Who holds the lease: unique even when two workers were given one worker id."""
        self.min_poll = min_poll
        self.max_poll = max_poll
        self.report_timeout = report_timeout
        self.credentials = credentials or RemoteCredentials(client.credential, None,
                                                            self.clock.time)  # fmt: skip
        self.jobs: dict[int, _Job] = {}
        self.polls = 0
        """Calls of claim_next (tests assert on it)."""
        self._wake = asyncio.Event()
        self._hard = asyncio.Event()
        self._stopping = False
        self._cancelled: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._playbooks: collections.OrderedDict[tuple[str, int | None],
                                                 asyncio.Future[model.Playbook]] = (
            collections.OrderedDict())  # fmt: skip
        self._claim_failures = 0
        self._deferrals = 0
        self._outbox: list[_Report] = []
        self._outbox_ready = asyncio.Event()
        self._claiming = 0
        """Slots a claim on its way may fill (the claim loop's and the reporter's add up)."""
        self._full = False
        """The claim loop waits for a slot to free (no timer runs: someone must wake it)."""

    # -- control ---------------------------------------------------------------------------

    def notify(self, notice: Notice | None = None) -> None:
        """Wake the claim loop now (a NATS notice, or anything else that hints at work)."""
        self._wake.set()

    def stop(self) -> None:
        """Graceful shutdown: stop claiming, finish running attempts within the grace."""
        if not self._stopping:
            log.info("stopping: no more claims, %d command(s) held", len(self.jobs),
                     extra={"action": "worker_stopping"})  # fmt: skip
        self._stopping = True
        self._wake.set()

    def kill(self) -> None:
        """End the grace period now (a second signal)."""
        self.stop()
        self._hard.set()

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def run(self) -> None:
        """Claim and run commands until `stop()`, then shut down as described above."""
        log.info("worker %s claiming from pool %r (concurrency %d, lease %gs)", self.worker_id,
                 self.pool, self.concurrency, self.lease_seconds,
                 extra={"action": "worker_started", "worker_id": self.worker_id})  # fmt: skip
        renewer = None
        if self._new_id is None:
            await self._lease_machine_id()
            renewer = asyncio.create_task(self._renew_machine_id(), name="machine-id")
        reporter = asyncio.create_task(self._reporter(), name="reporter")
        try:
            await self._claim_loop()
        finally:
            try:
                await self._shutdown()
            finally:
                for task in (reporter, renewer):
                    if task is not None:
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task

    # -- event ids -------------------------------------------------------------------------

    def _mint(self) -> int:
        assert self._new_id is not None, "run() leases a machine id before any attempt"
        return self._new_id()

    async def _lease_machine_id(self) -> None:
        """Ask the server for a machine id until it answers (or the worker is stopped);
        a refusal that will not pass (a 4xx: wrong role, an older server) fails the worker."""
        delay = self.min_poll
        failures = 0
        while True:
            try:
                await self._ask_machine_id()
                return
            except ServerRefused as exc:
                if not exc.transient:
                    raise MachineIdRefused(exc) from exc
                failure: Exception = exc
            except Exception as exc:  # noqa: BLE001 - unreachable, or a malformed reply
                failure = exc
            if self._stopping:
                return  # no claim follows, so no id is ever needed
            failures += 1
            log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                    "cannot lease a machine id (%s: %s); retrying every %.1fs at most",
                    type(failure).__name__, failure, self.max_poll,
                    extra={"action": "machine_id_failed"})  # fmt: skip
            await self.clock.sleep(delay)
            delay = min(delay * 2, self.max_poll)

    async def _ask_machine_id(self) -> None:
        asked = self.clock.time()
        reply = await self.client.machine_id(self._lease_holder, self._leased)
        self._use_machine_id(reply, (asked + self.clock.time()) / 2)

    def _use_machine_id(self, reply: Mapping[str, Any], local_now: float) -> None:
        leased = int(reply["machine_id"])
        expires_at = reply.get("expires_at")
        if isinstance(expires_at, int | float) and not isinstance(expires_at, bool):
            # the server refuses ids minted more than a few seconds ahead of its clock:
            # mint on its clock, as measured from this reply (`expires_at` = its now + ttl)
            self._clock_offset = expires_at - LEASE_TTL_S - local_now
        if leased != self._leased:
            if self._leased is not None:
                log.warning("machine id %d was lost: minting with %d from now on",
                            self._leased, leased, extra={"action": "machine_id_relet"})  # fmt: skip
            self._leased = leased
            self._new_id = Snowflake(leased, self._server_time)

    def _server_time(self) -> float:
        return self.clock.time() + self._clock_offset

    async def _renew_machine_id(self) -> None:
        while True:
            await self.clock.sleep(RENEW_EVERY_S)
            try:
                await self._ask_machine_id()
            except Exception as exc:  # noqa: BLE001 - the lease outlives a few misses
                log.warning("machine id renewal failed: %s: %s", type(exc).__name__, exc,
                            extra={"action": "machine_id_renew_failed"})  # fmt: skip

    # -- claiming --------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        delay = self.min_poll
        while not self._stopping:
            free = self.concurrency - len(self.jobs) - self._claiming
            if free <= 0:
                self._wake.clear()
                self._full = True
                try:
                    await self._wait(None)  # a slot frees, or stop
                finally:
                    self._full = False
                continue
            self._wake.clear()
            started = await self._claim(min(free, MAX_CLAIM))
            if started is None:  # the server failed: back off like an empty poll
                await self._wait(delay)
                delay = min(delay * 2, self.max_poll)
            elif started:
                delay = self.min_poll
                if started < min(free, MAX_CLAIM):
                    await self._wait(delay)
            else:
                await self._wait(delay)
                delay = min(delay * 2, self.max_poll)

    async def _claim(self, limit: int) -> int | None:
        """Claim up to `limit` commands and start them; the number started, None on error."""
        self.polls += 1
        self._claiming += limit
        try:
            commands = await self.client.claim_next(self.worker_id, limit=limit,
                                                    lease_seconds=self.lease_seconds,
                                                    pool=self.pool)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the loop must outlive a bad reply
            self._claim_failures += 1
            level = logging.WARNING if self._claim_failures == 1 else logging.DEBUG
            unexpected = not isinstance(exc, ServerRefused | ServerUnavailable)
            log.log(logging.ERROR if unexpected else level, "claim failed: %s: %s",
                    type(exc).__name__, exc, exc_info=unexpected,
                    extra={"action": "claim_failed"})  # fmt: skip
            return None
        finally:
            self._claiming -= limit
        if self._claim_failures:
            log.info("claiming again after %d failure(s)", self._claim_failures,
                     extra={"action": "claim_recovered"})  # fmt: skip
            self._claim_failures = 0
        return await self._accept(commands)

    async def _accept(self, commands: list[dict[str, Any]]) -> int:
        """Start claimed commands (give them back when stopping or cancelled); the number
        started."""
        started = 0
        for command in commands:
            job = self._job(command)
            if job is None:
                continue
            if self._stopping or job.execution_id in self._cancelled:
                await self._release(job)
                continue
            self._start(job)
            started += 1
        return started

    def _job(self, command: dict[str, Any]) -> _Job | None:
        try:
            lease = command.get("lease") or {}
            return _Job(command=command,
                        command_id=int(command.get("command_id") or command["event_id"]),
                        execution_id=int(command["execution_id"]), epoch=int(lease["epoch"]),
                        step=str(command.get("step")))  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            log.error("malformed command from the server (%s: %s); its lease will expire",
                      type(exc).__name__, exc, extra={"action": "command_malformed"})  # fmt: skip
            return None

    def _start(self, job: _Job) -> None:
        self.jobs[job.command_id] = job
        job.task = asyncio.create_task(self._run_job(job), name=f"command-{job.command_id}")
        self._log(job, logging.DEBUG, "command_claimed", "claimed (epoch %d)", job.epoch)

    async def _wait(self, timeout: float | None) -> None:
        """Until `_wake` is set or `timeout` seconds (of the clock) pass."""
        if self._wake.is_set():
            return
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._wake.wait())]
        if timeout is not None:
            waiters.append(asyncio.ensure_future(self.clock.sleep(timeout)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    # -- one command -----------------------------------------------------------------------

    async def _run_job(self, job: _Job) -> None:
        heartbeats = asyncio.create_task(self._heartbeats(job), name=f"heartbeat-{job.command_id}")
        try:
            outcome_item = await self._attempt(job)
            if outcome_item is not None and not job.lost:
                job.phase = "reporting"
                await self._report(job, *outcome_item)
        except asyncio.CancelledError:
            if not job.lost:
                raise
            self._log(job, logging.WARNING, "attempt_abandoned",
                      "lease lost: attempt abandoned, not reported")
        finally:
            heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeats
            self.jobs.pop(job.command_id, None)
            if not job.refilled or self._full:  # a report that refilled its slot is a poll
                self._wake.set()

    async def _attempt(self, job: _Job) -> tuple[WorkItem, AttemptResult] | None:
        try:
            item = work_item(job.command)
        except (KeyError, TypeError, ValueError) as exc:
            self._log(job, logging.ERROR, "command_malformed",
                      "malformed command (%s: %s); its lease will expire", type(exc).__name__, exc)
            return None
        try:
            playbook = await self._playbook(job)
            await self.credentials.prefetch(remote_credentials.names_for(
                playbook, item.step, item.context))  # fmt: skip
        except (_Transient, remote_credentials.CredentialsUnavailable) as exc:
            self._deferrals += 1
            delay = min(self.min_poll * 2 ** self._deferrals, self.max_poll)
            self._log(job, logging.WARNING, "command_deferred",
                      "cannot prepare the command (%s); giving it back in %.2fs", exc, delay)
            await self.clock.sleep(delay)  # no hot loop of claim, fail, release, claim
            await self._release(job)
            return None
        except MilepostError as exc:
            kind = "credential" if exc.code == "credential_refused" else "playbook"
            error = {"kind": kind, "message": exc.message, "retryable": False}
            return item, AttemptResult(ok=False, error=error)
        self._deferrals = 0
        job.phase = "running"
        self._log(job, logging.DEBUG, "attempt_started", "running")
        # a crash inside becomes an `internal` outcome there, logged redacted
        outcome = await attempt_mod.run_attempt(playbook, item, self.tools,
                                                sleep=self.clock.sleep,
                                                credentials=self.credentials)  # fmt: skip
        return item, outcome

    async def _heartbeats(self, job: _Job) -> None:
        interval = self.lease_seconds / 3
        while True:
            await self.clock.sleep(interval)
            try:
                reply = await self.client.heartbeat(job.command_id, self.worker_id, job.epoch,
                                                    lease_seconds=self.lease_seconds)  # fmt: skip
            except ServerRefused as exc:
                if exc.code == "execution_cancelled":
                    self._mark_cancelled(job)
                elif exc.code in _LOST_CODES or exc.status in (404, 409):
                    self._lose(job, exc.code)
                    return
                else:
                    self._heartbeat_failed(job, exc)
                continue
            except ServerUnavailable as exc:
                self._heartbeat_failed(job, exc)
                continue
            except Exception as exc:  # noqa: BLE001 - keep the lease alive through a bad reply
                self._heartbeat_failed(job, exc)
                continue
            if isinstance(reply, Mapping) and reply.get("cancelled"):
                self._mark_cancelled(job)

    def _heartbeat_failed(self, job: _Job, exc: Exception) -> None:
        self._log(job, logging.WARNING, "heartbeat_failed", "heartbeat failed: %s: %s",
                  type(exc).__name__, exc)  # fmt: skip

    def _lose(self, job: _Job, code: str) -> None:
        job.lost = True
        self._log(job, logging.WARNING, "lease_lost", "lease lost (%s)", code)
        if job.task is not None:
            job.task.cancel()

    def _mark_cancelled(self, job: _Job) -> None:
        if job.execution_id not in self._cancelled:
            self._log(job, logging.INFO, "execution_cancelled",
                      "execution cancelled: finishing this attempt, claiming no more of it")
        self._cancelled[job.execution_id] = None
        self._cancelled.move_to_end(job.execution_id)
        while len(self._cancelled) > CANCELLED_MEMORY:
            self._cancelled.popitem(last=False)

    async def _report(self, job: _Job, item: WorkItem, outcome: AttemptResult) -> None:
        """Hand the attempt's events to the reporter; returns once they went (or were
        given up on)."""
        events = report_events(item, outcome, self._mint(), self.clock.time(), self.worker_id)
        wire = _jsonable([wire_event(e, job.epoch, job.command_id) for e in events])
        entry = _Report(job, outcome, wire, asyncio.get_running_loop().create_future())
        self._outbox.append(entry)
        self._outbox_ready.set()
        await asyncio.shield(entry.sent)

    async def _reporter(self) -> None:
        """Send what the attempts report, everything that finished meanwhile in one batch."""
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            batch, self._outbox = self._outbox, []
            if batch:
                try:
                    await self._send(batch)
                except Exception:  # a bug here must not stop every later report
                    log.exception("reporter failed; %d report(s) not sent (their leases will "
                                  "lapse)", len(batch), extra={"action": "reporter_failed"})
                finally:
                    for entry in batch:
                        if not entry.sent.done():
                            entry.sent.set_result(None)

    def _refill(self, freed: int) -> dict[str, Any] | None:
        """The `claim` of a report that frees `freed` slots (None when nothing may be taken)."""
        if self._stopping:
            return None
        free = min(self.concurrency - len(self.jobs) - self._claiming + freed, MAX_CLAIM)
        if free <= 0:
            return None
        return {"worker_id": self.worker_id, "limit": free, "pool": self.pool,
                "lease_seconds": self.lease_seconds}  # fmt: skip

    async def _send(self, batch: list[_Report]) -> None:
        wire = [event for entry in batch for event in entry.wire]
        claim = self._refill(len(batch))
        limit = int(claim["limit"]) if claim else 0
        delay, waited = REPORT_RETRY_FIRST, 0.0
        while True:
            self._claiming += limit
            try:
                reply = await self.client.post_events(wire, claim)
            except ServerRefused as exc:
                if not exc.transient:
                    await self._refused(batch, exc)
                    return
                problem: MilepostError = exc
            except ServerUnavailable as exc:
                problem = exc
            else:
                await self._delivered(batch, reply, claim is not None)
                return
            finally:
                self._claiming -= limit
            if waited >= self.report_timeout:
                for entry in batch:
                    self._log(entry.job, logging.ERROR, "report_dropped",
                              "report dropped after %.0fs of failures: %s", waited, problem)
                return
            for entry in batch:
                self._log(entry.job, logging.WARNING, "report_retry",
                          "report failed, retrying in %.1fs: %s", delay, problem)
            await self.clock.sleep(delay)
            waited += delay
            delay = min(delay * 2, REPORT_RETRY_MAX)
            # the first try may have claimed commands before its reply was lost: a retry
            # claims nothing more (those leases lapse and the commands are re-issued)
            claim, limit = None, 0

    async def _delivered(self, batch: list[_Report], reply: Any, claimed: bool) -> None:
        commands = reply.get("commands") if isinstance(reply, Mapping) else None
        if claimed and isinstance(commands, list):
            await self._accept(commands)  # before the slots of `batch` free up
        stale = set(reply.get("stale") or ()) if isinstance(reply, Mapping) else set()
        ignored = set(reply.get("ignored") or ()) if isinstance(reply, Mapping) else set()
        for entry in batch:
            entry.job.refilled = claimed
            outcome = entry.outcome
            status = "ok" if outcome.ok else f"failure ({(outcome.error or {}).get('kind')})"
            late = any(str(e.get("event_id")) in stale for e in entry.wire)
            after = any(str(e.get("event_id")) in ignored for e in entry.wire)
            note = (", stored stale: it changed nothing" if late else
                    ", not stored: its run had ended" if after else "")  # fmt: skip
            # DEBUG when all is well: a line per step costs a busy worker real time
            self._log(entry.job, logging.WARNING if note else logging.DEBUG, "attempt_reported",
                      "reported %s (epoch %d)%s", status, entry.job.epoch, note)  # fmt: skip

    async def _refused(self, batch: list[_Report], exc: ServerRefused) -> None:
        """A 4xx names one bad report at most: send the others on their own."""
        if len(batch) > 1:
            for entry in batch:
                await self._send([entry])
            return
        if exc.code == "event_id_conflict" and not batch[0].reminted:
            # an id of this report is in the log for another event (a machine id shared by
            # mistake): the same report under fresh ids, once; a second refusal is logged
            batch[0].reminted = True
            for event in batch[0].wire:
                event["event_id"] = str(self._mint())
            await self._send(batch)
            return
        self._log(batch[0].job, logging.ERROR, "report_refused", "report refused: %s %s",
                  exc.code, exc.message)  # fmt: skip

    async def _release(self, job: _Job) -> None:
        try:
            await self.client.release(job.command_id, self.worker_id, job.epoch)
        except (ServerRefused, ServerUnavailable) as exc:
            self._log(job, logging.WARNING, "release_failed",
                      "release failed (%s); the lease will expire", exc)
            return
        self._log(job, logging.INFO, "command_released", "released")

    # -- playbooks -------------------------------------------------------------------------

    async def _playbook(self, job: _Job) -> model.Playbook:
        ref = job.command.get("playbook") or {}
        path = str(ref.get("path") or "")
        version = ref.get("version")
        key = (path, None if version is None else int(version))
        future = self._playbooks.get(key)
        if future is None:
            future = asyncio.ensure_future(self._fetch_playbook(*key))
            self._playbooks[key] = future
            while len(self._playbooks) > PLAYBOOK_CACHE:
                self._playbooks.popitem(last=False)
        else:
            self._playbooks.move_to_end(key)
        try:
            return await asyncio.shield(future)
        except (_Transient, MilepostError):
            if self._playbooks.get(key) is future:
                del self._playbooks[key]  # the next command of this playbook asks again
            raise

    async def _fetch_playbook(self, path: str, version: int | None) -> model.Playbook:
        try:
            entry = await self.client.resource(path, version)
        except ServerRefused as exc:
            if exc.transient:
                raise _Transient(f"catalog: {exc}") from exc
            raise
        except ServerUnavailable as exc:
            raise _Transient(str(exc)) from exc
        content = entry.get("content")
        if not isinstance(content, str):
            raise MilepostError(f"catalog entry {path}@{version} has no content")
        return load.load_text(content, source=f"{path}@{entry.get('version', version)}")

    # -- shutdown --------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        self._stopping = True
        unstarted = [job for job in self.jobs.values() if job.phase == "claimed"]
        for job in unstarted:
            assert job.task is not None
            job.task.cancel()
        await asyncio.gather(*(job.task for job in unstarted if job.task), return_exceptions=True)
        for job in unstarted:
            await self._release(job)
        running = [job.task for job in self.jobs.values() if job.task is not None]
        if running:
            log.info("waiting up to %gs for %d running attempt(s)", self.grace_seconds,
                     len(running), extra={"action": "worker_draining"})  # fmt: skip
            await self._grace(running)
        left = [job for job in self.jobs.values() if job.task is not None and not job.task.done()]
        for job in left:
            self._log(job, logging.WARNING, "attempt_cancelled",
                      "grace period over: cancelled unreported; the lease will expire")
            assert job.task is not None
            job.task.cancel()
        await asyncio.gather(*(job.task for job in left if job.task), return_exceptions=True)
        log.info("worker stopped", extra={"action": "worker_stopped"})

    async def _grace(self, tasks: list[asyncio.Task[None]]) -> None:
        done = asyncio.ensure_future(asyncio.wait(tasks))
        grace = asyncio.ensure_future(self.clock.sleep(self.grace_seconds))
        hard = asyncio.ensure_future(self._hard.wait())
        waiters: list[asyncio.Future[Any]] = [done, grace, hard]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    def _log(self, job: _Job, level: int, action: str, message: str, *args: Any,
             exc_info: bool = False) -> None:  # fmt: skip
        """Log about one command: its ids lead the message and go in `extra` (never values)."""
        if not log.isEnabledFor(level):
            return
        log.log(level, "command %s (step %r, execution %s): " + message, job.command_id, job.step,
                job.execution_id, *args, exc_info=exc_info,
                extra={"action": action, "command_id": str(job.command_id),
                       "execution_id": str(job.execution_id), "step": job.step})  # fmt: skip


# --------------------------------------------------------------------------------------------
# Entry points


async def run_worker(
    server: str | None = None,
    *,
    token: str | None = None,
    concurrency: int = 4,
    pool: str = "default",
    worker_id: str | None = None,
    nats_url: str | None = None,
    lease_seconds: float = 30.0,
    grace_seconds: float = 30.0,
    python_workers: int = 2,
    handle_signals: bool = False,
) -> None:
    """Run a worker against `server` until stopped (SIGTERM/SIGINT with `handle_signals`).

    Args:
        server: the server URL; default `MILEPOST_SERVER_URL`.
        token: a `worker` (or `admin`) token; default `MILEPOST_TOKEN`.
        nats_url: NATS for wake-ups; None = poll only.
        handle_signals: install SIGTERM/SIGINT handlers: the first stops gracefully,
            the second ends the grace period.
    """
    async with AsyncMilepostClient(server, token) as client:
        reports = ChannelClient(client)  # reports over the worker channel, the rest over HTTP
        blocking = MilepostClient(server, token, timeout=CREDENTIAL_FETCH_TIMEOUT)
        credentials = RemoteCredentials(client.credential, blocking.credential, time.time)
        tools = ToolRuntime(python_workers=python_workers, credentials=credentials,
                            children=ServerChildren(client))
        try:
            worker = Worker(reports, tools, concurrency=concurrency, pool=pool,
                            worker_id=worker_id, lease_seconds=lease_seconds,
                            grace_seconds=grace_seconds, credentials=credentials)  # fmt: skip
            wakeup = NatsWakeup(nats_url, pool, worker.notify, name=worker.worker_id) \
                if nats_url else None  # fmt: skip
            if wakeup is not None:
                wakeup.start()
            remove = _install_signals(worker) if handle_signals else None
            # a long-lived worker starts its python processes now, not on its first command
            # (a spawn costs most of a second); claims go on meanwhile
            warming = asyncio.create_task(_warm(tools), name="warm-python")
            try:
                await worker.run()
            finally:
                warming.cancel()
                if remove is not None:
                    remove()
                if wakeup is not None:
                    await wakeup.close()
        finally:
            await reports.aclose()
            await tools.aclose()
            blocking.close()


async def _warm(tools: ToolRuntime) -> None:
    try:
        await tools.python.start()
    except Exception as exc:  # noqa: BLE001 - the first python command will try again
        log.warning("could not start the python processes ahead of time: %s", exc,
                    extra={"action": "python_warm_failed"})  # fmt: skip


def _install_signals(worker: Worker) -> Callable[[], None]:
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if worker.stopping:
            log.warning("%s again: ending the grace period", name, extra={"action": "worker_kill"})
            worker.kill()
        else:
            log.info("%s: shutting down", name, extra={"action": "worker_signal"})
            worker.stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)

    def remove() -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)

    return remove


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


def worker_main(
    server: str | None = None,
    *,
    token: str | None = None,
    concurrency: int | None = None,
    pool: str | None = None,
    worker_id: str | None = None,
    nats_url: str | None = None,
    lease_seconds: float | None = None,
    grace_seconds: float | None = None,
    python_workers: int | None = None,
    log_level: str | None = None,
) -> int:
    """The blocking entry of `milepost worker`; returns the exit code (0 after a clean stop).

    Every argument left None falls back to its environment variable: MILEPOST_SERVER_URL,
    MILEPOST_TOKEN, MILEPOST_WORKER_CONCURRENCY (4), MILEPOST_POOL (else
    MILEPOST_NATS_POOL, else `default`), MILEPOST_WORKER_ID (`host:pid`),
    MILEPOST_NATS_URL (none: poll only), MILEPOST_LEASE_SECONDS (30),
    MILEPOST_GRACE_SECONDS (30), MILEPOST_PYTHON_WORKERS (2), MILEPOST_LOG_LEVEL (INFO).
    Event ids use MILEPOST_MACHINE_ID, else a machine id leased from the server.
    """
    env = os.environ
    level = (log_level or env.get("MILEPOST_LOG_LEVEL") or "INFO").upper()
    if not logging.getLogger().handlers:
        logging.basicConfig(level=level,
                            format="%(asctime)s %(levelname)s %(name)s %(message)s")  # fmt: skip
    else:
        logging.getLogger().setLevel(level)
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(run_worker(
            server or env.get("MILEPOST_SERVER_URL"),
            token=token or env.get("MILEPOST_TOKEN"),
            concurrency=concurrency or int(env.get("MILEPOST_WORKER_CONCURRENCY") or 4),
            pool=pool or env.get("MILEPOST_POOL") or env.get("MILEPOST_NATS_POOL") or "default",
            worker_id=worker_id or env.get("MILEPOST_WORKER_ID"),
            nats_url=nats_url or env.get("MILEPOST_NATS_URL") or None,
            lease_seconds=lease_seconds or _env_float("MILEPOST_LEASE_SECONDS", 30.0),
            grace_seconds=grace_seconds if grace_seconds is not None
            else _env_float("MILEPOST_GRACE_SECONDS", 30.0),
            python_workers=python_workers or int(env.get("MILEPOST_PYTHON_WORKERS") or 2),
            handle_signals=True,
            ))  # fmt: skip
    return 0


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when it is installed (it is a dependency): a worker's time goes to the event
    loop and HTTP; the standard loop otherwise."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
