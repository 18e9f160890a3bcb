"""`milepost logs ID [--step S] [--follow] [--output F]`: what a run's attempts printed
(stdout, stderr, a python step's traceback), from the local database or a server, in the
order they were reported; `--follow` polls from the last entry's cursor until the run has
ended (a Ctrl-C says the run goes on and how to follow it again). On a server the follow
reads again when the run's event stream brings a report (its logs are stored before it),
not every second."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from milepost.cli.executions import going_on
from milepost.cli.inputs import DbOption, OutputOption, ServerOption
from milepost.cli.output import Format, chosen, emit, emit_one, err, out, remote
from milepost.cli.reads import Runs, runs
from milepost.client.event_stream import NoStream
from milepost.core import state as st
from milepost.engine.event_query import EventQuery
from milepost.engine.fence import REPORT_TYPES
from milepost.store.attempt_logs import LOG_PAGE

app = typer.Typer()

FOLLOW_POLL = 1.0
"""Seconds between two reads of a followed run (what it prints arrives with its reports)."""

Page = Callable[[int], dict[str, Any]]
"""after -> `{status, entries, next}`, the shape of `GET /api/executions/{id}/logs`."""


@app.command("logs")
def logs(
    execution_id: int,
    db: DbOption = None,
    server: ServerOption = None,
    step: Annotated[str | None, typer.Option(help="Only this step's.")] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing what the run prints until it ends (Ctrl-C stops following).",
        ),
    ] = False,
    output: OutputOption = None,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json", help="One JSON object per entry per line (as --follow prints them)."
        ),
    ] = False,
) -> None:
    """Print what an execution's steps printed: stdout, stderr and tracebacks, per attempt
    (local database or a server).

    --output json prints one JSON array of the entries; --json, and --follow, one JSON
    object per line; --output yaml one YAML list (followed: an item at a time).
    """
    fmt = chosen(output, json_out)
    # the entries as they come (a line each), or gathered into one document
    streamed = follow or fmt is Format.table or (json_out and output is None)
    again = f"logs {execution_id}{f' --step {shlex.quote(step)}' if step else ''} --follow"
    with runs(server, db) as where:

        def page(after: int) -> dict[str, Any]:
            return dict(remote(lambda: where.logs(execution_id, step=step, after=after)))

        try:
            wake = _Wake(where, execution_id) if follow else None
            gathered = _show(page, execution_id, wake, fmt if streamed else None)
        except KeyboardInterrupt:
            raise going_on(where, execution_id, "stopped following its logs", again) from None
    if not streamed:
        emit(gathered, fmt)


class _Wake:
    """What a follow waits for before it reads the logs again: the next report in the
    server's event stream, or `FOLLOW_POLL` (the local database, a server without it)."""

    def __init__(self, where: Runs, execution_id: int) -> None:
        # the log's end before the first read of the logs: a report past it wakes the follow
        last = remote(lambda: where.events(execution_id, EventQuery(), tail=1))["last_seq"]
        self.live = where.live(execution_id, int(last))

    def __call__(self) -> None:
        if self.live is None:
            time.sleep(FOLLOW_POLL)
        elif not remote(self._report):
            self.live = None  # ended with the run (the next read says so), or not there: poll

    def _report(self) -> bool:
        """True once the stream brought a report; False when it ended or is not there."""
        assert self.live is not None
        try:
            return any(event["event_type"] in REPORT_TYPES for event in self.live)
        except NoStream:
            return False


def _show(
    page: Page, execution_id: int, wake: Callable[[], None] | None, fmt: Format | None
) -> list[dict[str, Any]]:
    """Print each entry as it is read in `fmt` (none: print nothing, gather them all);
    with `wake`, read until the run has ended, waiting on it between reads. The entries
    not printed."""
    after, shown, gathered = 0, 0, []
    while True:
        body = page(after)
        for entry in body["entries"]:
            if fmt is None:
                gathered.append(entry)
            else:
                _print(entry, fmt)
        shown += len(body["entries"])
        after = int(body["next"])
        if len(body["entries"]) >= LOG_PAGE:
            continue  # a full page: more is there now
        if wake is None or body["status"] in st.TERMINAL:
            break
        wake()
    if not shown and fmt is Format.table:
        err.print(
            f"execution {execution_id} ({body['status']}) has printed nothing"
            f"{' yet' if body['status'] not in st.TERMINAL else ''}",
            highlight=False,
        )
    return gathered


def _print(entry: dict[str, Any], fmt: Format) -> None:
    if fmt is not Format.table:
        emit_one(entry, fmt)
        return
    out.print(
        f"==> {entry['step']} (attempt {entry['attempt']}) {entry['stream']} <==",
        style="bold",
        highlight=False,
        markup=False,
    )
    text = entry["text"]
    out.print(text if text.endswith("\n") else text + "\n", end="", highlight=False, markup=False)
