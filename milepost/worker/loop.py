"""The worker loop: claims commands from the server over HTTP, runs them, reports.

One `Worker` runs up to `concurrency` attempts at once on one event loop:

- **claiming**: `POST /api/commands/claim` for the free slots; when nothing comes back it
  waits 0.05 s, doubling to 2 s, and back to 0.05 s once work arrives. A NATS notice
  (`nats_wakeup`), a finished attempt or a shutdown cuts the wait short. NATS is a
  hint, the server's queue is the truth.
- **running**: the playbook is fetched once per (path, version) (`playbooks`); the
  `WorkItem` is decoded from the claim (`wire.work_item_from_wire`); `run_attempt` runs
  it. Event ids are minted on a machine id leased from the server (`machine_ids`).
  Credentials come from the server (`remote_credentials`), fetched before the
  attempt and cached briefly; the tools and the keychain read them from that cache.
- **leases**: a heartbeat every lease/3 while a command is held. A heartbeat refused
  with 409/404 means the lease is lost: the attempt is abandoned and never reported (the
  server has re-issued it). `cancelled: true` stops the execution's running attempts
  (`attempt.stopping`: the tool is killed or aborted; each is reported failed with kind
  `cancelled`) and no more of its commands are taken.
- **reporting** (`reporter`): finished attempts go in batches, each report claiming the
  commands for every free slot; a delivered report frees its attempts' slots at once.
- **token**: a 401/403 of the auth layer, at a claim, a heartbeat or a renewal, ends the
  worker at once and `run` raises `TokenRefused` (`token`): retrying would not pass.
- **shutdown** (`stop()`, SIGTERM/SIGINT): stop claiming, give back claimed commands not
  yet started, let running attempts finish within `grace_seconds`, then cancel the rest
  unreported (their leases expire and the server re-issues them).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from milepost import wire
from milepost.attempt import runner as attempt_mod
from milepost.client import ServerRefused, ServerUnavailable
from milepost.core.work import AttemptResult, WorkItem
from milepost.errors import MilepostError
from milepost.settings import Settings
from milepost.worker import jobs, machine_ids, remote_credentials, token
from milepost.worker.clock import Clock, RealClock
from milepost.worker.jobs import Job, log_job
from milepost.worker.machine_ids import EventIds
from milepost.worker.nats_wakeup import Notice
from milepost.worker.playbooks import CatalogUnavailable, Playbooks
from milepost.worker.remote_credentials import RemoteCredentials
from milepost.worker.reporter import REPORT_TIMEOUT, Reporter

log = logging.getLogger(__name__)

MIN_POLL = 0.05
MAX_POLL = 2.0
CANCELLED_MEMORY = 10_000
MAX_CLAIM = 100
"""The server's cap on `limit` of one claim."""
_LOST_CODES = frozenset(
    {"stale_epoch", "already_terminal", "active_claim", "command_not_found", "not_found"}
)


class WorkerClient(Protocol):
    """What the worker needs of the server (`AsyncMilepostClient`, or a fake in tests)."""

    async def claim_next(
        self,
        worker_id: str,
        limit: int = 1,
        lease_seconds: float | None = None,
        pool: str | None = None,
    ) -> list[dict[str, Any]]: ...

    async def heartbeat(
        self, event_id: int | str, worker_id: str, epoch: int, lease_seconds: float | None = None
    ) -> dict[str, Any]: ...

    async def release(self, event_id: int | str, worker_id: str, epoch: int) -> dict[str, Any]: ...

    async def machine_id(
        self,
        worker_id: str,
        machine_id: int | None = None,
        *,
        pool: str | None = None,
        worker: dict[str, Any] | None = None,
        release: bool = False,
    ) -> dict[str, Any]: ...

    async def post_events(
        self, events: list[dict[str, Any]], claim: dict[str, Any] | None = None
    ) -> dict[str, Any]: ...

    async def resource(self, path: str, version: int | None = None) -> dict[str, Any]: ...

    async def credential(self, name: str) -> dict[str, Any] | None: ...


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Worker:
    """Claims, runs and reports commands until `stop()`; see the module docstring.

    Args:
        client: the server (`AsyncMilepostClient`).
        tools: runs tool calls (`ToolRuntime`); not closed by the worker.
        settings: where the arguments left None come from (default `Settings()`, the
            environment): concurrency, pool, worker_id, lease_seconds, grace_seconds.
        concurrency: attempts run at once.
        pool: the pool whose commands this worker takes.
        worker_id: the name the server records; default `host:pid`.
        lease_seconds: lease asked for at claim and at each heartbeat (every third of it).
        grace_seconds: how long running attempts may take to finish after `stop()`.
        clock: time and sleeps (tests pass a fake one).
        new_id: event ids; default a Snowflake on the settings' `machine_id`, else on a
            machine id leased from the server when `run` starts and renewed while it runs.
        min_poll, max_poll: the polling back-off.
        report_timeout: how long a report is retried while the server is unreachable.
        credentials: the lookup given to `run_attempt` (pass the same to the tools);
            default: fetched through `client`, cached for 30 s.
        announce: what else its start line says, after its concurrency (`PythonPool.describe`:
            the python processes it runs at once).
    """

    def __init__(
        self,
        client: WorkerClient,
        tools: attempt_mod.ToolRunner,
        *,
        settings: Settings | None = None,
        concurrency: int | None = None,
        pool: str | None = None,
        worker_id: str | None = None,
        lease_seconds: float | None = None,
        grace_seconds: float | None = None,
        clock: Clock | None = None,
        new_id: Callable[[], int] | None = None,
        min_poll: float = MIN_POLL,
        max_poll: float = MAX_POLL,
        report_timeout: float = REPORT_TIMEOUT,
        credentials: RemoteCredentials | None = None,
        announce: str | None = None,
    ) -> None:
        settings = settings or Settings()
        self.concurrency = settings.concurrency if concurrency is None else concurrency
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.client = client
        self.tools = tools
        self.pool = pool or settings.worker_pool()
        self.worker_id = worker_id or settings.worker_id or default_worker_id()
        self.lease_seconds = lease_seconds or settings.lease_seconds
        self.grace_seconds = settings.grace_seconds if grace_seconds is None else grace_seconds
        self.announce = announce
        self.log_cap = settings.log_cap_bytes
        self.clock: Clock = clock or RealClock()
        self.min_poll = min_poll
        self.max_poll = max_poll
        # the holder of the machine id lease: unique even when two workers share a worker id
        self.ids = EventIds(
            client,
            f"{self.worker_id}/{secrets.token_hex(4)}",
            self.clock,
            new_id,
            settings=settings,
            min_poll=min_poll,
            max_poll=max_poll,
            pool=self.pool,
            check_in=machine_ids.describe(self),
        )
        self.reporter = Reporter(
            client, self, self.clock, self.ids.mint, self.worker_id, report_timeout
        )
        self.playbooks = Playbooks(client)
        self.credentials = credentials or RemoteCredentials(
            client.credential, None, self.clock.time
        )
        self.jobs: dict[int, Job] = {}
        self.polls = 0
        """Calls of claim_next (tests assert on it)."""
        self._wake = asyncio.Event()
        self._hard = asyncio.Event()
        self._stopping = False
        self._cancelled: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._claim_failures = 0
        self._deferrals = 0
        self._claiming = 0
        """Slots a claim on its way may fill (the claim loop's and the reporter's add up)."""
        self._full = False
        """The claim loop waits for a slot to free (no timer runs: someone must wake it)."""
        self.token = token.Watch(self.kill)  # a refused token ends it now: `run` raises that

    # -- control ---------------------------------------------------------------------------

    def notify(self, notice: Notice | None = None) -> None:
        """Wake the claim loop now (a NATS notice, or anything else that hints at work)."""
        self._wake.set()

    def stop(self) -> None:
        """Graceful shutdown: stop claiming, finish running attempts within the grace."""
        if not self._stopping:
            log.info(
                "stopping: no more claims, %d command(s) held",
                len(self.jobs),
                extra={"action": "worker_stopping"},
            )
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
        log.info(
            "worker %s claiming from pool %r (concurrency %d%s; lease %gs)",
            self.worker_id,
            self.pool,
            self.concurrency,
            f"; {self.announce}" if self.announce else "",
            self.lease_seconds,
            extra={"action": "worker_started", "worker_id": self.worker_id},
        )
        renewer = None
        if self.ids.needs_lease:
            await self.ids.lease(lambda: self._stopping)
            renewer = asyncio.create_task(self.ids.renew_forever(self.token), name="machine-id")
        elif self.ids.presence_only:  # MILEPOST_MACHINE_ID: a lease only to be seen alive
            renewer = asyncio.create_task(
                self.ids.renew_forever(self.token, ask_first=True), name="presence"
            )
        reporter = asyncio.create_task(self.reporter.run(), name="reporter")
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
                await self.ids.release()  # a clean stop: not reported lost
        self.token.raise_refused()

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
        try:
            with self.claiming(limit):
                commands = await self.client.claim_next(
                    self.worker_id, limit=limit, lease_seconds=self.lease_seconds, pool=self.pool
                )
        except Exception as exc:  # noqa: BLE001 - the loop must outlive a bad reply
            if self.token(exc):
                return None
            self._claim_failures += 1
            level = logging.WARNING if self._claim_failures == 1 else logging.DEBUG
            unexpected = not isinstance(exc, ServerRefused | ServerUnavailable)
            log.log(
                logging.ERROR if unexpected else level,
                "claim failed: %s: %s",
                type(exc).__name__,
                exc,
                exc_info=unexpected,
                extra={"action": "claim_failed"},
            )
            return None
        if self._claim_failures:
            log.info(
                "claiming again after %d failure(s)",
                self._claim_failures,
                extra={"action": "claim_recovered"},
            )
            self._claim_failures = 0
        return await self.accept(commands)

    async def accept(self, commands: list[dict[str, Any]]) -> int:
        """Start claimed commands (give them back when stopping or cancelled); the number
        started."""
        started = 0
        for command in commands:
            job = self._job(command)
            if job is None:
                continue
            if self._stopping or (job.execution_id in self._cancelled and not _final_step(command)):
                await self._release(job)  # a cancelled run's work (its final steps run)
                continue
            self._start(job)
            started += 1
        return started

    def reported(self, job: Job) -> None:
        """The job's report was delivered: its slot is free (`Reporter._delivered`)."""
        self.jobs.pop(job.command_id, None)

    def refill_claim(self, freed: int) -> dict[str, Any] | None:
        """The `claim` of a report that frees `freed` slots (None when nothing may be taken)."""
        if self._stopping:
            return None
        free = min(self.concurrency - len(self.jobs) - self._claiming + freed, MAX_CLAIM)
        if free <= 0:
            return None
        return {
            "worker_id": self.worker_id,
            "limit": free,
            "pool": self.pool,
            "lease_seconds": self.lease_seconds,
        }

    @contextlib.contextmanager
    def claiming(self, slots: int) -> Iterator[None]:
        """Count `slots` as taken while a claim that may fill them is on its way."""
        self._claiming += slots
        try:
            yield
        finally:
            self._claiming -= slots

    def _job(self, command: dict[str, Any]) -> Job | None:
        try:
            lease = command.get("lease") or {}
            return Job(
                command=command,
                command_id=int(command.get("command_id") or command["event_id"]),
                execution_id=int(command["execution_id"]),
                epoch=int(lease["epoch"]),
                step=str(command.get("step")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            log.error(
                "malformed command from the server (%s: %s); its lease will expire",
                type(exc).__name__,
                exc,
                extra={"action": "command_malformed"},
            )
            return None

    def _start(self, job: Job) -> None:
        self.jobs[job.command_id] = job
        job.task = asyncio.create_task(self._run_job(job), name=f"command-{job.command_id}")
        log_job(job, logging.DEBUG, "command_claimed", "claimed (epoch %d)", job.epoch)

    async def _wait(self, timeout: float | None) -> None:
        """Until `_wake` is set or `timeout` seconds (of the clock) pass."""
        if self._wake.is_set():
            return
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._wake.wait())]
        if timeout is not None:
            waiters.append(asyncio.ensure_future(self.clock.sleep(timeout)))
        await first_of(waiters)

    # -- one command -----------------------------------------------------------------------

    async def _run_job(self, job: Job) -> None:
        heartbeats = job.heartbeats = asyncio.create_task(
            self._heartbeats(job), name=f"heartbeat-{job.command_id}"
        )
        try:
            outcome_item = await self._attempt(job)
            if outcome_item is not None and not job.lost:
                job.phase = "reporting"
                await self.reporter.report(job, *outcome_item)
        except asyncio.CancelledError:
            if not job.lost:
                raise
            log_job(
                job,
                logging.WARNING,
                "attempt_abandoned",
                "lease lost: attempt abandoned, not reported",
            )
        finally:
            heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeats
            self.jobs.pop(job.command_id, None)
            if not job.refilled or self._full:  # a report that refilled its slot is a poll
                self._wake.set()

    async def _attempt(self, job: Job) -> tuple[WorkItem, AttemptResult] | None:
        try:
            item = wire.work_item_from_wire(job.command)
        except (KeyError, TypeError, ValueError) as exc:
            log_job(
                job,
                logging.ERROR,
                "command_malformed",
                "malformed command (%s: %s); its lease will expire",
                type(exc).__name__,
                exc,
            )
            return None
        try:
            playbook = await self.playbooks.get(job.command.get("playbook") or {})
            await self.credentials.prefetch(
                remote_credentials.names_for(playbook, item.step, item.context)
            )
        except (CatalogUnavailable, remote_credentials.CredentialsUnavailable) as exc:
            self._deferrals += 1
            delay = min(self.min_poll * 2**self._deferrals, self.max_poll)
            log_job(
                job,
                logging.WARNING,
                "command_deferred",
                "cannot prepare the command (%s); giving it back in %.2fs",
                exc,
                delay,
            )
            await self.clock.sleep(delay)  # no hot loop of claim, fail, release, claim
            await self._release(job)
            return None
        except MilepostError as exc:
            kind = "credential" if exc.code == "credential_refused" else "playbook"
            error = {"kind": kind, "message": exc.message, "retryable": False}
            return item, AttemptResult(ok=False, error=error)
        self._deferrals = 0
        job.phase = "running"
        log_job(job, logging.DEBUG, "attempt_started", "running")
        # a crash inside becomes an `internal` outcome there, logged redacted
        outcome = await job.stopper.run(
            attempt_mod.run_attempt(
                playbook,
                item,
                self.tools,
                sleep=self.clock.sleep,
                credentials=self.credentials,
                log_cap=self.log_cap,
                # an approval's expiry is the server's time: its clock as the last machine
                # id lease measured it
                clock=self.ids.server_time,
                on_retry=lambda retry: self.reporter.note(job, item, retry),
            )
        )
        return item, outcome

    async def _heartbeats(self, job: Job) -> None:
        # every third of the lease the claim gave (the step's liveness), not a global one
        interval = jobs.heartbeat_every(job.command.get("lease"), self.lease_seconds)
        while True:
            await job.wait_beat(self.clock, interval)
            try:
                reply = await self.client.heartbeat(
                    job.command_id, self.worker_id, job.epoch, lease_seconds=self.lease_seconds
                )
            except ServerRefused as exc:
                if self.token(exc):
                    return
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
            if isinstance(reply, Mapping):
                interval = jobs.heartbeat_every(reply.get("lease"), self.lease_seconds)

    def _heartbeat_failed(self, job: Job, exc: Exception) -> None:
        log_job(
            job,
            logging.WARNING,
            "heartbeat_failed",
            "heartbeat failed: %s: %s",
            type(exc).__name__,
            exc,
        )

    def _lose(self, job: Job, code: str) -> None:
        job.lost = True
        log_job(job, logging.WARNING, "lease_lost", "lease lost (%s)", code)
        if job.task is not None:
            job.task.cancel()

    def _mark_cancelled(self, job: Job) -> None:
        if job.execution_id not in self._cancelled:
            log_job(
                job,
                logging.INFO,
                "execution_cancelled",
                "execution cancelled: stopping its attempts, claiming no more of it",
            )
        for held in list(self.jobs.values()):
            if held.execution_id == job.execution_id and not _final_step(held.command):
                held.stopper.stop()
        self._cancelled[job.execution_id] = None
        self._cancelled.move_to_end(job.execution_id)
        while len(self._cancelled) > CANCELLED_MEMORY:
            self._cancelled.popitem(last=False)

    async def _release(self, job: Job) -> None:
        try:
            await self.client.release(job.command_id, self.worker_id, job.epoch)
        except (ServerRefused, ServerUnavailable) as exc:
            log_job(
                job,
                logging.WARNING,
                "release_failed",
                "release failed (%s); the lease will expire",
                exc,
            )
            return
        log_job(job, logging.INFO, "command_released", "released")

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
            log.info(
                "waiting up to %gs for %d running attempt(s)",
                self.grace_seconds,
                len(running),
                extra={"action": "worker_draining"},
            )
            await self._grace(running)
        left = [job for job in self.jobs.values() if job.task is not None and not job.task.done()]
        for job in left:
            log_job(
                job,
                logging.WARNING,
                "attempt_cancelled",
                "grace period over: cancelled unreported; the lease will expire",
            )
            assert job.task is not None
            job.task.cancel()
        await asyncio.gather(*(job.task for job in left if job.task), return_exceptions=True)
        log.info("worker stopped", extra={"action": "worker_stopped"})

    async def _grace(self, tasks: list[asyncio.Task[None]]) -> None:
        done = asyncio.ensure_future(asyncio.wait(tasks))
        grace = asyncio.ensure_future(self.clock.sleep(self.grace_seconds))
        hard = asyncio.ensure_future(self._hard.wait())
        waiters: list[asyncio.Future[Any]] = [done, grace, hard]
        await first_of(waiters)


def _final_step(command: Mapping[str, Any]) -> bool:
    """A compensation's command (DSL 10.5) or a teardown step's: its run's status is
    settled, and a cancel of the run does not stop it."""
    context = command.get("context")
    return isinstance(context, Mapping) and (
        context.get("compensation") is not None or context.get("teardown") is not None
    )


async def first_of(waiters: list[asyncio.Future[Any]]) -> None:
    """Wait for the first of `waiters` to finish, then cancel and reap the others."""
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
