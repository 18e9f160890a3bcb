"""Reading executions, from the local database or a server (`--server`, or
MILEPOST_SERVER_URL without `--db`): `list`, `status [--wait]`, `describe`."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from milepost.cli import exit_codes
from milepost.cli.inputs import DbOption, JsonOption, OutputOption, ServerOption
from milepost.cli.output import (
    Format,
    chosen,
    duration,
    emit,
    err,
    fail,
    out,
    print_status,
    print_waits,
    remote,
    short,
    shown_time,
    wait_text,
)
from milepost.cli.reads import Runs, runs
from milepost.core import state as st
from milepost.playbook.durations import parse_duration

app = typer.Typer()

STATUSES = (st.RUNNING, st.COMPLETED, st.FAILED, st.CANCELLED)


def parse_since(value: str, now: float) -> float:
    """`--since`: a duration ago (`30m`, `2h`, `1d`) or an ISO-8601 time (UTC unless it
    names a zone), as epoch seconds."""
    try:
        return now - parse_duration(value)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise fail(
            f"--since {value!r}: use a duration ago (30m, 2h, 1d) or an ISO-8601 time "
            "(2026-12-01T17:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@app.command("list")
def list_(
    db: DbOption = None,
    server: ServerOption = None,
    status: Annotated[
        str | None,
        typer.Option(help=f"Only this status: {', '.join(STATUSES)}.", show_default=False),
    ] = None,
    playbook: Annotated[
        str | None,
        typer.Option(help="Only runs of this catalog path (tests/hello).", show_default=False),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Only runs started since: a duration ago (30m, 2h, 1d) or an ISO-8601 time.",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 50,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the ids, one a line.")] = False,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """List executions, newest first: id, playbook, status, start, end and duration."""
    wanted = status.upper() if status else None
    if wanted is not None and wanted not in STATUSES:
        raise fail(f"--status {status!r}: use one of {', '.join(STATUSES)}")
    after = None if since is None else parse_since(since, time.time())
    with runs(server, db) as where:
        items = remote(
            lambda: where.executions(status=wanted, path=playbook, since=after, limit=limit)
        )
    if quiet:
        for item in items:
            typer.echo(item["execution_id"])
        return
    if (fmt := chosen(output, json_out)) is not Format.table:
        emit(items, fmt)
        return
    if not items:
        out.print("no executions", highlight=False)
        return
    waits = any(item.get("waiting") for item in items)
    table = Table(
        "execution", "playbook", "status", "start", "end", "duration", *(["waiting"] * waits)
    )
    now = time.time()
    for item in items:
        table.add_row(
            item["execution_id"],
            item["path"],
            item["status"],
            shown_time(item["created_at"]),
            shown_time(item.get("ended_at")),
            duration(item.get("duration_s")),
            *([wait_text(item["waiting"], now) if item.get("waiting") else ""] * waits),
        )
    out.print(table)


@app.command()
def status(
    execution_id: int,
    db: DbOption = None,
    server: ServerOption = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="Wait for the run to end; exit 0 COMPLETED, 1 FAILED or CANCELLED."
        ),
    ] = False,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Show an execution's status, failure reason and steps."""
    fmt = chosen(output, json_out)
    with runs(server, db) as where:
        if not wait:
            print_status(remote(lambda: where.status(execution_id)), fmt)
            return
        data = waited(where, execution_id)
    print_status(data, fmt)
    raise typer.Exit(exit_codes.of_run(data["status"]))


def waited(where: Runs, execution_id: int) -> dict[str, Any]:
    """The status once the run ended; a Ctrl-C says the run goes on (exit 130)."""
    try:
        first = remote(lambda: where.status(execution_id))  # no such run: at once
        if first["status"] in st.TERMINAL:
            return dict(first)
        err.print(
            f"waiting for execution {execution_id} ({first['status']}) to end; Ctrl-C "
            "stops waiting, not the run",
            highlight=False,
            soft_wrap=True,
        )
        return dict(remote(lambda: where.wait(execution_id)))
    except KeyboardInterrupt:
        raise going_on(where, execution_id, "stopped waiting") from None


def going_on(where: Runs, execution_id: int, what: str, follow: str | None = None) -> typer.Exit:
    """What a Ctrl-C of a command that watched a run says: the run goes on, and how to
    follow it again (`follow`, the command without its place flags: by default its
    events), wait for it or stop it."""
    flags = where.flags()
    again = follow or f"events {execution_id} --follow"
    err.print(
        f"{what}; execution {execution_id} goes on (nothing was cancelled). Follow it: "
        f"milepost {again}{flags} · wait for it: milepost status "
        f"{execution_id} --wait{flags} · stop it: milepost cancel {execution_id}{flags}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    return typer.Exit(exit_codes.INTERRUPTED)


@app.command()
def describe(
    execution_id: int,
    db: DbOption = None,
    server: ServerOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Show a run step by step: status, attempts, start, end, duration, worker, input
    (redacted), result; a failed step's error with its stderr or response body."""
    with runs(server, db) as where:
        data = remote(lambda: where.describe(execution_id))
    if (fmt := chosen(output, json_out)) is not Format.table:
        emit(data, fmt)
        return
    print_described(data)


def print_described(data: dict[str, Any]) -> None:
    took = duration(data.get("duration_s"))
    out.print(
        f"execution {data['execution_id']} {data['path']} v{data['version']}: "
        f"[bold]{data['status']}[/bold]",
        highlight=False,
    )
    out.print(
        f"started {shown_time(data['started_at'])} by {data.get('started_by') or '-'}"
        + (f" · ended {shown_time(data['ended_at'])} · took {took}" if took else ""),
        highlight=False,
        markup=False,
    )
    if data["status"] == st.FAILED and data.get("error"):
        error = data["error"]
        out.print(
            f"reason: {error.get('reason') or error.get('message')}", highlight=False, markup=False
        )
    table = Table("step", "status", "attempts", "start", "end", "duration", "worker", "result")
    for name, step in data["steps"].items():
        table.add_row(
            name,
            step["status"],
            str(step.get("attempts_total", "")),
            shown_time(step.get("started_at")),
            shown_time(step.get("ended_at")),
            duration(step.get("duration_s")),
            step.get("worker") or "",
            short(step.get("result"), 60),
        )
    out.print(table)
    for name, step in data["steps"].items():
        out.print(f"{name}: input {short(step.get('input'), 200)}", highlight=False, markup=False)
        if step.get("compensates"):
            out.print(
                f"  compensation: undoes {', '.join(step['compensates'])}",
                highlight=False,
                markup=False,
            )
        if step["status"] == st.FAILED:
            for line in failure_lines(step):
                out.print(f"  {line}", highlight=False, markup=False)
    print_waits(data, time.time())


def failure_lines(step: dict[str, Any]) -> list[str]:
    """A failed step's error, and what its tool returned with it: a shell step's stderr
    (and stdout), an http step's status and body."""
    error = step.get("error") or {}
    lines = [f"error: {error.get('message') or error.get('kind') or 'failed'}"]
    result = step.get("result")
    if not isinstance(result, dict):
        return lines + ([f"output: {short(result, 500)}"] if result is not None else [])
    if "status_code" in result:
        lines.append(f"http status: {result['status_code']}")
    for key in ("stderr", "stdout", "body"):
        value = result.get(key)
        if value not in (None, ""):
            text = value if isinstance(value, str) else short(value, 2000)
            lines.append(f"{key}:")
            lines.extend("  " + line for line in text.rstrip("\n").splitlines()[-40:])
    return lines
