"""`milepost events`: a run's log, from the local database or a server, by step and type,
the last few, or followed as it grows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import typer

from milepost.cli.executions import going_on
from milepost.cli.inputs import DbOption, OutputOption, ServerOption
from milepost.cli.output import (
    Format,
    chosen,
    emit,
    emit_one,
    exit_code,
    fail,
    out,
    remote,
    short,
    shown_time,
)
from milepost.cli.reads import Runs, all_events, follow, runs
from milepost.engine import event_query
from milepost.errors import MilepostError

app = typer.Typer()


@app.command()
def events(
    execution_id: int,
    db: DbOption = None,
    server: ServerOption = None,
    step: Annotated[
        str | None, typer.Option(help="Only this step's events.", show_default=False)
    ] = None,
    type_: Annotated[
        list[str] | None,
        typer.Option(
            "--type",
            help="Only these event types (repeatable or comma-separated); a name "
            "without a dot is a family: command is command.*.",
            show_default=False,
        ),
    ] = None,
    tail: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Only the last N events (with --follow: then the new ones).",
            show_default=False,
        ),
    ] = None,
    follow_: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Keep printing events as they come, until the run ends."
        ),
    ] = False,
    output: OutputOption = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="One JSON object per line (as --follow prints them).")
    ] = False,
) -> None:
    """Print an execution's event log: time, seq, event, step, status and payload.

    --output json prints one JSON array; --json, and --follow, one JSON object per line
    (what scripts of earlier versions read).
    """
    fmt = chosen(output, json_out)
    query = event_query.EventQuery(step, event_query.types_of(type_ or []))
    with runs(server, db) as where:
        if not follow_:
            if tail is None:
                items = remote(lambda: list(all_events(where, execution_id, query)))
            else:
                items = remote(lambda: where.events(execution_id, query, tail=tail)["events"])
            if fmt is Format.table or (json_out and output is None):
                _stream(items, fmt)
            else:
                emit(items, fmt)
            return
        _follow(where, execution_id, query, tail, fmt)


def _follow(
    where: Runs, execution_id: int, query: event_query.EventQuery, tail: int | None, fmt: Format
) -> None:
    after = 0
    try:
        if tail is not None:  # the last few, then what comes after the log as it was
            page = remote(lambda: where.events(execution_id, query, tail=tail))
            _stream(page["events"], fmt)
            after = int(page["last_seq"])
        _stream(follow(where, execution_id, query, after), fmt)
    except KeyboardInterrupt:
        raise going_on(where, execution_id, "stopped following") from None
    except MilepostError as exc:  # the run vanished, the server went away
        raise fail(exc.message, exit_code(exc)) from None


def _stream(items: Iterable[dict[str, Any]], fmt: Format) -> None:
    """Each event as it comes: a line, a JSON line, or a one-item YAML list (the stream is
    one YAML list)."""
    for item in items:
        if fmt is Format.table:
            _lines([item])
        else:
            emit_one(item, fmt)


def _lines(items: Iterable[dict[str, Any]]) -> None:
    for item in items:
        out.print(line(item), highlight=False, markup=False)


def line(item: dict[str, Any]) -> str:
    """`2026-12-01 17:01:58.123  #5  command.completed  start  COMPLETED  {"n": 2}`."""
    payload = (item.get("result") or {}).get("context")
    return "  ".join(
        [
            shown_time(item.get("created_at")),
            f"#{item.get('seq', ''):<4}",
            f"{item['event_type']:<26}",
            f"{item.get('step') or '-':<16}",
            f"{item.get('status') or '':<10}",
            short(payload, 100),
        ]
    )
