"""Playbooks and a server's catalog: `validate` a file, `register` it, `execute` an entry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from milepost.cli.inputs import JsonOption, ServerOption, read_workload
from milepost.cli.output import err, fail, out, print_status, remote
from milepost.client import MilepostClient
from milepost.core import state as st
from milepost.errors import PlaybookInvalid
from milepost.playbook import load

app = typer.Typer()


@app.command()
def validate(files: Annotated[list[Path], typer.Argument(help="Playbook files.")]) -> None:
    """Check playbooks without running them; lists every problem of every file."""
    bad = 0
    for file in files:
        try:
            playbook = load.load_file(file)
        except PlaybookInvalid as exc:
            bad += 1
            err.print(f"[red]✗[/red] {exc.message}", highlight=False)
            continue
        except OSError as exc:
            bad += 1
            err.print(f"[red]✗[/red] {file}: {exc.strerror}", highlight=False)
            continue
        out.print(f"[green]✓[/green] {file} ({len(playbook.steps)} steps)", highlight=False)
        for warning in playbook.warnings:
            out.print(f"  [yellow]warning:[/yellow] {warning}", highlight=False)
    raise typer.Exit(1 if bad else 0)


@app.command()
def register(file: Annotated[Path, typer.Argument(help="Playbook YAML file.")],
             server: ServerOption = None) -> None:  # fmt: skip
    """Register a playbook in a server's catalog (a new version when its text changed)."""
    try:
        text = file.read_text()
    except OSError as exc:
        raise fail(f"cannot read {file}: {exc.strerror}") from None
    with MilepostClient(server) as client:
        entry = remote(lambda: client.register(text))
    out.print(f"registered {entry['path']} version {entry['version']}", highlight=False)


@app.command()
def execute(
    path: Annotated[str, typer.Argument(help="Catalog path of a registered playbook.")],
    payload: Annotated[str | None, typer.Option(help="Workload as a JSON object.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Workload value KEY=VALUE.")] = [],  # noqa: B006
    version: Annotated[int | None, typer.Option(help="Catalog version (default: latest).")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the end; exit 0 if COMPLETED.")] = False,
    server: ServerOption = None,
    json_out: JsonOption = False,
) -> None:
    """Start an execution on a server."""
    workload = read_workload(payload, set_)
    with MilepostClient(server) as client:
        xid = remote(lambda: client.execute(path, workload, version=version))
        if not wait:
            typer.echo(json.dumps({"execution_id": str(xid)}) if json_out else f"execution {xid}")
            return
        data = remote(lambda: client.wait(xid))  # the final status reply
    print_status(data, json_out)
    raise typer.Exit(0 if data["status"] == st.COMPLETED else 1)
