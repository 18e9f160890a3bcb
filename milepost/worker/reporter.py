"""The worker's reports: attempts that finish while a report is on its way go together in
the next `POST /api/events/batch` (each event carries its lease epoch), and that request
also claims the commands for the slots it frees (`claim`): the server answers with the
next commands, claimed in the transaction that stored the reports, so a chain of steps
costs one round trip per step. Retried while the server is unreachable (event ids make
the retry idempotent; a retry claims nothing, since the first try may have)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from milepost import wire
from milepost.client import ServerRefused, ServerUnavailable
from milepost.core import logs
from milepost.core.work import AttemptResult, TaskRetry, WorkItem, report_events, retry_note_events
from milepost.errors import MilepostError
from milepost.worker.clock import Clock
from milepost.worker.jobs import Job, log_job

log = logging.getLogger(__name__)

REPORT_RETRY_FIRST = 0.2
REPORT_RETRY_MAX = 5.0
REPORT_TIMEOUT = 120.0
"""Seconds a report is retried while the server is unreachable; after that the lease
has long expired and the command was re-issued, so the report would change nothing."""


class EventSink(Protocol):
    async def post_events(
        self, events: list[dict[str, Any]], claim: dict[str, Any] | None = None
    ) -> dict[str, Any]: ...


class Slots(Protocol):
    """What the reporter asks of the worker's claiming: the claim a report may carry, a
    count of the slots such a claim may fill while it is on its way, the commands it
    brought back, and the slots its delivery frees."""

    def refill_claim(self, freed: int) -> dict[str, Any] | None: ...

    def claiming(self, slots: int) -> contextlib.AbstractContextManager[None]: ...

    async def accept(self, commands: list[dict[str, Any]]) -> int: ...

    def reported(self, job: Job) -> None: ...


@dataclass(slots=True, eq=False)
class Report:
    """One attempt's events waiting for the reporter, and who waits for them to go."""

    job: Job
    outcome: AttemptResult
    wire: list[dict[str, Any]]
    sent: asyncio.Future[None]
    reminted: bool = False
    """Its ids were minted again after an `event_id_conflict`."""
    note: bool = False
    """A note of an attempt still running (a task policy's retry): it frees no slot."""


class Reporter:
    """Sends the reports handed to `report`, batched, from the task `run`."""

    def __init__(
        self,
        client: EventSink,
        slots: Slots,
        clock: Clock,
        mint: Callable[[], int],
        worker_id: str,
        report_timeout: float = REPORT_TIMEOUT,
    ) -> None:
        self.client = client
        self.slots = slots
        self.clock = clock
        self.mint = mint
        self.worker_id = worker_id
        self.report_timeout = report_timeout
        self._outbox: list[Report] = []
        self._outbox_ready = asyncio.Event()

    async def report(self, job: Job, item: WorkItem, outcome: AttemptResult) -> None:
        """Hand the attempt's events to the reporter; returns once they went (or were
        given up on)."""
        events = report_events(item, outcome, self.mint(), self.clock.time(), self.worker_id)
        body = wire.jsonable([wire.event_to_wire(e, job.epoch, job.command_id) for e in events])
        if outcome.logs:  # beside the report, never in its payload (`core.logs`)
            body[-1]["logs"] = logs.to_wire(outcome.logs)
        entry = Report(job, outcome, body, asyncio.get_running_loop().create_future())
        self._outbox.append(entry)
        self._outbox_ready.set()
        await asyncio.shield(entry.sent)

    def note(self, job: Job, item: WorkItem, retry: TaskRetry) -> None:
        """Queue the note of a task policy's retry (`retry_note_events`) with the logs of the
        failed execution; sent with the next batch, ahead of the attempt's own report. Not
        waited for: the attempt waits on its policy, not on the server."""
        events = retry_note_events(item, retry, self.mint(), self.clock.time(), self.worker_id)
        body = wire.jsonable([wire.event_to_wire(e, job.epoch, job.command_id) for e in events])
        if retry.logs:
            body[-1]["logs"] = logs.to_wire(retry.logs)
        outcome = AttemptResult(ok=False, error=retry.error)
        future = asyncio.get_running_loop().create_future()
        self._outbox.append(Report(job, outcome, body, future, note=True))
        self._outbox_ready.set()

    async def run(self) -> None:
        """Send what the attempts report, everything that finished meanwhile in one batch."""
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            batch, self._outbox = self._outbox, []
            if batch:
                try:
                    await self._send(batch)
                except Exception:  # a bug here must not stop every later report
                    log.exception(
                        "reporter failed; %d report(s) not sent (their leases will lapse)",
                        len(batch),
                        extra={"action": "reporter_failed"},
                    )
                finally:
                    for entry in batch:
                        if not entry.sent.done():
                            entry.sent.set_result(None)

    async def _send(self, batch: list[Report]) -> None:
        events = [event for entry in batch for event in entry.wire]
        claim = self.slots.refill_claim(sum(1 for entry in batch if not entry.note))
        limit = int(claim["limit"]) if claim else 0
        delay, waited = REPORT_RETRY_FIRST, 0.0
        while True:
            with self.slots.claiming(limit):
                try:
                    reply = await self.client.post_events(events, claim)
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
            if waited >= self.report_timeout:
                for entry in batch:
                    log_job(
                        entry.job,
                        logging.ERROR,
                        "report_dropped",
                        "report dropped after %.0fs of failures: %s",
                        waited,
                        problem,
                    )
                return
            for entry in batch:
                log_job(
                    entry.job,
                    logging.WARNING,
                    "report_retry",
                    "report failed, retrying in %.1fs: %s",
                    delay,
                    problem,
                )
            await self.clock.sleep(delay)
            waited += delay
            delay = min(delay * 2, REPORT_RETRY_MAX)
            # the first try may have claimed commands before its reply was lost: a retry
            # claims nothing more (those leases lapse and the commands are re-issued)
            claim, limit = None, 0

    async def _delivered(self, batch: list[Report], reply: Any, claimed: bool) -> None:
        commands = reply.get("commands") if isinstance(reply, Mapping) else None
        if claimed and isinstance(commands, list):
            await self.slots.accept(commands)  # before the slots of `batch` free up
        stale = set(reply.get("stale") or ()) if isinstance(reply, Mapping) else set()
        ignored = set(reply.get("ignored") or ()) if isinstance(reply, Mapping) else set()
        for entry in batch:
            if entry.note:
                continue  # its attempt runs on: its slot stays taken
            entry.job.refilled = claimed
            # its slot is free now, not once its task resumes: the next report (which may
            # go out before that) asks for it in its own claim
            self.slots.reported(entry.job)
            outcome = entry.outcome
            status = "ok" if outcome.ok else f"failure ({(outcome.error or {}).get('kind')})"
            late = any(str(e.get("event_id")) in stale for e in entry.wire)
            after = any(str(e.get("event_id")) in ignored for e in entry.wire)
            note = (
                ", stored stale: it changed nothing"
                if late
                else ", not stored: its run had ended"
                if after
                else ""
            )
            # DEBUG when all is well: a line per step costs a busy worker real time
            log_job(
                entry.job,
                logging.WARNING if note else logging.DEBUG,
                "attempt_reported",
                "reported %s (epoch %d)%s",
                status,
                entry.job.epoch,
                note,
            )

    async def _refused(self, batch: list[Report], exc: ServerRefused) -> None:
        """A 4xx names one bad report at most: send the others on their own."""
        if len(batch) > 1:
            for entry in batch:
                await self._send([entry])
            return
        if _ids_refused(exc) and not batch[0].reminted:
            # an id of this report is in the log for another event (a machine id shared by
            # mistake), or on a machine id no longer this worker's (its lease lapsed while
            # the server was away, and another process took it): the same report under
            # fresh ids, once; a second refusal is logged
            batch[0].reminted = True
            for event in batch[0].wire:
                event["event_id"] = str(self.mint())
            await self._send(batch)
            return
        log_job(
            batch[0].job,
            logging.ERROR,
            "report_refused",
            "report refused: %s %s",
            exc.code,
            exc.message,
        )


def _ids_refused(exc: ServerRefused) -> bool:
    """The server refused the report for its event ids alone: `event_id_conflict`, or a 422
    naming only `event_id`s (`api.ingest`: not minted on this worker's own machine id)."""
    if exc.code == "event_id_conflict":
        return True
    errors = exc.fields.get("errors")
    return (
        exc.code == "validation_error"
        and isinstance(errors, list)
        and bool(errors)
        and all(
            isinstance(e, dict) and isinstance(e.get("loc"), list) and e["loc"][-1:] == ["event_id"]
            for e in errors
        )
    )
