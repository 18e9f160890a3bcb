"""Playbooks and a server's catalog: `validate` a file, `register` it, `execute` an entry."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from milepost.cli import exit_codes
from milepost.cli.event_log import line
from milepost.cli.executions import going_on
from milepost.cli.inputs import (
    DbOption,
    JsonOption,
    OutputOption,
    ServerOption,
    opened,
    read_playbook,
    read_workload,
    reading_engine,
    server_client,
    server_settings,
)
from milepost.cli.output import (
    Format,
    chosen,
    emit,
    err,
    exit_code,
    fail,
    out,
    print_status,
    remote,
)
from milepost.cli.reads import ServerRuns, follow
from milepost.client import MilepostClient
from milepost.engine.event_query import EventQuery
from milepost.errors import MilepostError, PlaybookInvalid
from milepost.playbook import load, model, scripts, yamllines

PROGRESS = EventQuery(
    types=(
        "execution",
        "step",
        "approval",
        "command.failed",
        "command.retry_scheduled",
        "compensation",
    )
)
"""The events `execute --wait` shows as the run goes."""

app = typer.Typer()


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Playbook files.")],
    strict: Annotated[
        bool,
        typer.Option("--strict", help=("Warnings are errors (DSL 12.2): a file with any fails.")),
    ] = False,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Check playbooks without running them; lists every problem of every file.

    --output json or yaml: a list of the files, each with valid, steps, problems and
    warnings (with --strict its warnings are its problems)."""
    fmt = chosen(output, json_out)
    checked = [_checked(file, strict) for file in files]
    if fmt is not Format.table:
        emit([item for item, _ in checked], fmt)
    else:
        for item, message in checked:
            _print_checked(item, message)
    raise typer.Exit(
        exit_codes.RUN_FAILED if any(not item["valid"] for item, _ in checked) else exit_codes.OK
    )


def _checked(file: Path, strict: bool) -> tuple[dict[str, Any], str]:
    """One file's verdict, `{file, valid, steps, problems, warnings}`, and the message of
    a file that could not be loaded as the table prints it (with the file's name)."""
    item: dict[str, Any] = {
        "file": str(file),
        "valid": False,
        "steps": None,
        "problems": [],
        "warnings": [],
    }
    try:
        playbook = load.load_file(file)
    except PlaybookInvalid as exc:
        return {**item, "problems": list(exc.problems)}, exc.message
    except OSError as exc:
        return {**item, "problems": [exc.strerror or str(exc)]}, f"{file}: {exc.strerror}"
    refused = strict and bool(playbook.warnings)  # then each warning is an error
    return {
        **item,
        "valid": not refused,
        "steps": len(playbook.steps),
        **(
            {"problems": list(playbook.warnings)}
            if refused
            else {"warnings": list(playbook.warnings)}
        ),
    }, ""


def _print_checked(item: dict[str, Any], message: str) -> None:
    # whole lines however long (paths, messages): a script or a wide log can match them
    if item["steps"] is None:
        err.print(f"[red]✗[/red] {escape(message)}", highlight=False, soft_wrap=True)
        return
    said, mark, label, lines = (
        (out, "[green]✓[/green]", "[yellow]warning:[/yellow]", item["warnings"])
        if item["valid"]
        else (err, "[red]✗[/red]", "[red]error (--strict):[/red]", item["problems"])
    )
    said.print(
        f"{mark} {escape(item['file'])} ({item['steps']} steps)", highlight=False, soft_wrap=True
    )
    for text in lines:
        said.print(f"  {label} {escape(text)}", highlight=False, soft_wrap=True)


@app.command()
def register(
    file: Annotated[Path, typer.Argument(help="Playbook YAML file.")],
    db: DbOption = None,
    server: ServerOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Register a playbook in a catalog (a new version when its text changed): a server's
    (--server, or MILEPOST_SERVER_URL without --db), else the local database's, where an
    embedded run's `playbook` steps find it.

    --output json or yaml: the file with its catalog path and version, or with its
    problems (exit 2, nothing registered)."""
    fmt = chosen(output, json_out)
    text = read_playbook(file)
    try:  # every problem named here, with the file's name and lines, before the server
        limits = yamllines.Limits.of()
        text = scripts.inline_text(text, file.parent, str(file), limits=limits)  # no files there
        playbook = load.load_text(text, source=str(file), limits=limits)
        if server_settings(db).strict_playbooks and playbook.warnings:  # as a server refuses
            raise PlaybookInvalid(list(playbook.warnings), str(file))
    except PlaybookInvalid as exc:
        if fmt is not Format.table:
            emit({"file": str(file), "registered": False, "problems": list(exc.problems)}, fmt)
        raise fail(exc.message) from None
    client = server_client(server, db)
    if client is None:
        entry = _register_locally(db, text, playbook)
    else:
        with client:
            entry = remote(lambda: client.register(text))
    if fmt is not Format.table:
        emit({"file": str(file), "registered": True, **entry}, fmt)
        return
    out.print(f"registered {entry['path']} version {entry['version']}", highlight=False)


def _register_locally(db: str | None, text: str, playbook: model.Playbook) -> dict[str, Any]:
    """The catalog entry of `text` in the local database (made if need be: a write), in
    the server's wire shape."""
    from milepost.api import views

    with opened(db) as store:
        engine = reading_engine(store)
        path, version = engine.register(text, playbook)
        entry = engine.catalog_entry(path, version)
    assert entry is not None
    return views.catalog_entry(entry).model_dump()


@app.command()
def execute(
    path: Annotated[str, typer.Argument(help="Catalog path of a registered playbook.")],
    payload: Annotated[str | None, typer.Option(help="Workload as a JSON object.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Workload value KEY=VALUE.")] = [],  # noqa: B006
    version: Annotated[int | None, typer.Option(help="Catalog version (default: latest).")] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help=(
                "Follow the run to its end (its steps as they go); exit 0 COMPLETED, 1 FAILED or "
                "CANCELLED."
            ),
        ),
    ] = False,
    server: ServerOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Start an execution on a server; prints its id at once."""
    fmt = chosen(output, json_out)
    workload = read_workload(payload, set_)
    with MilepostClient(server) as client:
        xid = remote(lambda: client.execute(path, workload, version=version))
        if not wait:
            if fmt is Format.table:
                out.print(f"execution {xid}", highlight=False)
            else:
                emit({"execution_id": str(xid)}, fmt)
            return
        data = _followed(ServerRuns(client), int(xid), fmt)
    print_status(data, fmt)
    raise typer.Exit(exit_codes.of_run(data["status"]))


def _followed(where: ServerRuns, xid: int, fmt: Format) -> dict[str, Any]:
    """The run's steps as they go (on stderr when stdout is for a document), then its
    final status; a Ctrl-C says the run goes on and how to follow it."""
    say = out if fmt is Format.table else err
    try:  # from the first line on, a Ctrl-C (even mid-print) names the run that goes on
        say.print(
            f"execution {xid} started; following it (Ctrl-C stops following, not the run)",
            highlight=False,
        )
        for event in follow(where, xid, PROGRESS):
            say.print(line(event), highlight=False, markup=False)
        return dict(where.status(xid))
    except KeyboardInterrupt:
        raise going_on(where, xid, "stopped following") from None
    except MilepostError as exc:
        raise fail(exc.message, exit_code(exc)) from None
