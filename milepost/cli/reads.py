"""Where the read commands find runs: the local database, read through the engine, or a
server, through the client. Both answer in the server's wire shapes (`api.views`,
`api.schemas_reads`), so `--output json` reads the same either way."""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from milepost.cli.inputs import existing_store, reading_engine, server_client
from milepost.cli.output import iso
from milepost.client import MilepostClient
from milepost.client.event_stream import NoStream
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.engine import describe, event_query, summaries, unattended

LOCAL_POLL = 0.2
"""How often a wait or a follow on the local database looks at it again (no long-poll
there: another process, `milepost run` or `resume`, writes the run)."""
SERVER_POLL = 0.5
"""How often `events --follow` asks a server for the events past the last one."""
APPROVALS_PAGE = 500
"""Approvals read a page at a time by `milepost approvals`."""


class Runs(Protocol):
    poll: float

    def flags(self) -> str:
        """The options that name this place again in a command to copy (`--server URL`)."""
        ...

    def executions(
        self, *, status: str | None, path: str | None, since: float | None, limit: int
    ) -> list[dict[str, Any]]: ...

    def status(self, execution_id: int) -> dict[str, Any]: ...

    def wait(self, execution_id: int) -> dict[str, Any]:
        """The status once the run ended (a server long-polls; the local database is read
        again every `LOCAL_POLL`)."""
        ...

    def describe(self, execution_id: int) -> dict[str, Any]: ...

    def events(
        self,
        execution_id: int,
        query: event_query.EventQuery,
        *,
        after: int = 0,
        tail: int | None = None,
    ) -> dict[str, Any]:
        """`{events, next, last_seq, status}`: a page past seq `after` (`tail`: the last)."""
        ...

    def diagnosis(self, execution_id: int) -> dict[str, Any]: ...

    def usage(self, path: str | None) -> list[dict[str, Any]]: ...

    def workers(self, *, pool: str | None, status: str | None) -> list[dict[str, Any]]: ...

    def logs(self, execution_id: int, *, step: str | None, after: int) -> dict[str, Any]:
        """`{status, entries, next}`: what the run printed past the cursor `after`."""
        ...

    def approvals(self, *, status: str | None, execution_id: int | None) -> list[dict[str, Any]]:
        """Every approval of this status (and run), page after page."""
        ...

    def live(self, execution_id: int, after: int) -> Iterator[dict[str, Any]] | None:
        """The run's events past seq `after` as they are stored, until it ended (a server's
        event stream; `event_stream.NoStream` from one without it); None: poll instead."""
        ...


class LocalRuns:
    """The runs of a local database (SQLite or PostgreSQL), read through the engine; one
    that is not there is NoDatabase, never made by a read."""

    poll = LOCAL_POLL

    def __init__(self, db: str | None) -> None:
        self.db = db
        self.store = existing_store(db)
        self.engine = reading_engine(self.store)

    def close(self) -> None:
        self.store.close()

    def flags(self) -> str:
        return f" --db {shlex.quote(self.db)}" if self.db else ""

    def executions(
        self, *, status: str | None, path: str | None, since: float | None, limit: int
    ) -> list[dict[str, Any]]:
        from milepost.api import list_page  # the server's wire shape, its progress and waits

        rows = self.engine.executions(status=status, path=path, limit=limit, offset=0, since=since)
        return [item.model_dump() for item in list_page.items(self.engine, rows, self._waits)]

    def _waits(self, execution_id: int) -> list[dict[str, Any]]:
        """What the run waits on, from the log folded as it is (no key needed, as `status`)."""
        state = fl.fold(None, self.engine.events(execution_id))
        return self.engine.waits_of(state, self.engine.playbook(state.path, state.version or 0))

    def status(self, execution_id: int) -> dict[str, Any]:
        # the log folded as it is: no key is needed to read a run sealed with one
        row = self.engine.execution(execution_id)
        # a queued command of a pool no live worker serves, as a server's status says (read
        # before the log, as the server does: the steps it names are in the fold)
        missing = self.engine.missing_workers(execution_id)
        state = fl.fold(None, self.engine.events(row.execution_id))
        summary = summaries.execution_summary(state)
        if state.terminal:
            return summary
        playbook = self.engine.playbook(state.path, state.version or 0)
        summary["waits"] = self.engine.waits_of(state, playbook)
        summary = summaries.with_missing_workers(summary, missing)
        # a local run whose `milepost run` is gone: only a resume (or a cancel) moves it
        waiting = unattended.undriven(self.engine, execution_id)
        if waiting is not None:
            resume = f"milepost resume {execution_id}{self.flags()}"
            summary = {**summary, "no_driver": {**waiting, "resume": resume}}
        return summary

    def wait(self, execution_id: int) -> dict[str, Any]:
        while not self.engine.ended(execution_id):
            time.sleep(self.poll)
        return self.status(execution_id)

    def describe(self, execution_id: int) -> dict[str, Any]:
        return describe.describe(self.engine, execution_id)

    def events(
        self,
        execution_id: int,
        query: event_query.EventQuery,
        *,
        after: int = 0,
        tail: int | None = None,
    ) -> dict[str, Any]:
        from milepost.api import views

        page = event_query.page(self.engine, execution_id, query, after=after, tail=tail)
        return {
            "events": [views.event_out(e).model_dump() for e in page.events],
            "next": page.next_after,
            "last_seq": page.last_seq,
            "status": page.status,
        }

    def diagnosis(self, execution_id: int) -> dict[str, Any]:
        from milepost.engine import diagnosis

        return diagnosis.local(self.store, execution_id, self.engine.clock())

    def usage(self, path: str | None) -> list[dict[str, Any]]:
        from milepost.api import views

        return [views.playbook_usage(r).model_dump() for r in self.engine.playbook_usage(path)]

    def workers(self, *, pool: str | None, status: str | None) -> list[dict[str, Any]]:
        from milepost.api import schemas_workers

        found = self.engine.workers(pool=pool, status=status)
        return [schemas_workers.worker_out(w).model_dump() for w in found]

    def logs(self, execution_id: int, *, step: str | None, after: int) -> dict[str, Any]:
        # the status first: entries read after it was terminal are all there will be
        row = self.engine.execution(execution_id)
        rows = self.engine.logs(execution_id, step=step, after=after)
        return {
            "status": row.status,
            "next": rows[-1].log_id if rows else after,
            "entries": [
                {
                    "cursor": r.log_id,
                    "step": r.step,
                    "attempt": r.attempt,
                    "command_id": str(r.command_id),
                    "stream": r.stream,
                    "text": r.text,
                    "cut": r.cut,
                    "created_at": iso(r.created_at),
                }
                for r in rows
            ],
        }

    def approvals(self, *, status: str | None, execution_id: int | None) -> list[dict[str, Any]]:
        from milepost.api import views

        rows = []
        after: int | None = None
        while page := self.engine.approvals(
            status=status, execution_id=execution_id, limit=APPROVALS_PAGE, after=after
        ):
            rows.extend(page)
            after = page[-1].approval_id
        return [views.approval_item(r).model_dump() for r in rows]

    def live(self, execution_id: int, after: int) -> Iterator[dict[str, Any]] | None:
        return None  # another process writes the run: nothing here hears of it but a read


class ServerRuns:
    """The runs of a server, through its API."""

    poll = SERVER_POLL

    def __init__(self, client: MilepostClient) -> None:
        self.client = client

    def close(self) -> None:
        self.client.close()

    def flags(self) -> str:
        return f" --server {shlex.quote(self.client.base_url)}"

    def executions(
        self, *, status: str | None, path: str | None, since: float | None, limit: int
    ) -> list[dict[str, Any]]:
        return self.client.executions(status=status, path=path, limit=limit, since=since)

    def status(self, execution_id: int) -> dict[str, Any]:
        return self.client.status(execution_id)

    def wait(self, execution_id: int) -> dict[str, Any]:
        return self.client.wait(execution_id)

    def describe(self, execution_id: int) -> dict[str, Any]:
        return self.client.describe(execution_id)

    def events(
        self,
        execution_id: int,
        query: event_query.EventQuery,
        *,
        after: int = 0,
        tail: int | None = None,
    ) -> dict[str, Any]:
        return self.client.event_page(
            execution_id,
            step=query.step,
            types=",".join(query.types) or None,
            after=after,
            tail=tail,
        )

    def diagnosis(self, execution_id: int) -> dict[str, Any]:
        return self.client.diagnosis(execution_id)

    def usage(self, path: str | None) -> list[dict[str, Any]]:
        return self.client.usage(path)

    def workers(self, *, pool: str | None, status: str | None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.client.workers(pool=pool, status=status)["items"]
        return items

    def logs(self, execution_id: int, *, step: str | None, after: int) -> dict[str, Any]:
        return self.client.logs(execution_id, step=step, after=after)

    def live(self, execution_id: int, after: int) -> Iterator[dict[str, Any]] | None:
        return self.client.stream_events(execution_id, after)

    def approvals(self, *, status: str | None, execution_id: int | None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            body = self.client.approvals(
                status=status, execution_id=execution_id, limit=APPROVALS_PAGE, after=after
            )
            items.extend(body["items"])
            if (after := body.get("next")) is None:
                return items


@contextmanager
def runs(server: str | None, db: str | None) -> Iterator[LocalRuns | ServerRuns]:
    """The server of `--server` (or MILEPOST_SERVER_URL without `--db`), else the database."""
    client = server_client(server, db)
    where: LocalRuns | ServerRuns = LocalRuns(db) if client is None else ServerRuns(client)
    try:
        yield where
    finally:
        where.close()


def all_events(
    where: Runs, execution_id: int, query: event_query.EventQuery
) -> Iterator[dict[str, Any]]:
    """Every matching event of the run as it is now, page after page."""
    after = 0
    while True:
        page = where.events(execution_id, query, after=after)
        yield from page["events"]
        if page["next"] is None:
            return
        after = int(page["next"])


def follow(
    where: Runs, execution_id: int, query: event_query.EventQuery, after: int = 0
) -> Iterator[dict[str, Any]]:
    """The matching events past seq `after`, as they are appended, until the run ended and
    its last event was read: the log as it is in pages (filtered by the server, which also
    says whether the run and step exist), then a server's event stream, else polling."""
    streamed = True
    while True:
        page = where.events(execution_id, query, after=after)
        yield from page["events"]
        after = int(page["next"] if page["next"] is not None else page["last_seq"])
        if page["next"] is not None:
            continue
        if page["status"] in st.TERMINAL:
            return
        live = where.live(execution_id, after) if streamed else None
        if live is None:
            time.sleep(where.poll)
            continue
        try:
            for event in live:
                if query.admits(event.get("step"), str(event["event_type"])):
                    yield event
            return  # the stream ends after the run's last event
        except NoStream as gone:  # a server without the stream: poll it from there
            streamed, after = False, gone.after
