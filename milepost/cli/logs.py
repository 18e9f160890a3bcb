"""`milepost logs ID [--step S] [--follow]`: what a run's attempts printed (stdout, stderr,
a python step's traceback), from the local database or a server, in the order they were
reported; `--follow` polls from the last entry's cursor until the run has ended."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from milepost.cli import exit_codes
from milepost.cli.inputs import DbOption, ServerOption
from milepost.cli.output import err, out, remote
from milepost.cli.reads import runs
from milepost.core import state as st
from milepost.store.attempt_logs import LOG_PAGE

app = typer.Typer()

FOLLOW_POLL = 1.0
"""Seconds between two reads of a followed run (what it prints arrives with its reports)."""

Page = Callable[[int], dict[str, Any]]
"""after -> `{status, entries, next}`, the shape of `GET /api/executions/{id}/logs`."""


@app.command("logs")
def logs(
    execution_id: int, db: DbOption = None, server: ServerOption = None,
    step: Annotated[str | None, typer.Option(help="Only this step's.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing what the run "
                                         "prints until it ends (Ctrl-C stops following).")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per entry.")] = False,
) -> None:  # fmt: skip
    """Print what an execution's steps printed: stdout, stderr and tracebacks, per attempt
    (local database or a server)."""
    with runs(server, db) as where:
        _show(lambda after: remote(lambda: where.logs(execution_id, step=step, after=after)),
              execution_id, follow, json_out)  # fmt: skip


def _show(page: Page, execution_id: int, follow: bool, json_out: bool) -> None:
    after, shown = 0, 0
    try:
        while True:
            body = page(after)
            for entry in body["entries"]:
                _print(entry, json_out)
            shown += len(body["entries"])
            after = int(body["next"])
            if len(body["entries"]) >= LOG_PAGE:
                continue  # a full page: more is there now
            if not follow or body["status"] in st.TERMINAL:
                break
            time.sleep(FOLLOW_POLL)
    except KeyboardInterrupt:
        err.print(f"stopped following execution {execution_id}; the run goes on", highlight=False)
        raise typer.Exit(exit_codes.INTERRUPTED) from None
    if not shown and not json_out:
        err.print(f"execution {execution_id} ({body['status']}) has printed nothing"
                  f"{' yet' if body['status'] not in st.TERMINAL else ''}", highlight=False)


def _print(entry: dict[str, Any], json_out: bool) -> None:
    if json_out:
        typer.echo(json.dumps(entry))
        return
    out.print(f"==> {entry['step']} (attempt {entry['attempt']}) {entry['stream']} <==",
              style="bold", highlight=False, markup=False)  # fmt: skip
    text = entry["text"]
    out.print(text if text.endswith("\n") else text + "\n", end="", highlight=False,
              markup=False)  # fmt: skip
