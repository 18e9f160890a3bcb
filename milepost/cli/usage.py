"""`milepost usage`: what the tools reported using (DSL 10.6), summed per playbook, provider
and model, from the local database's totals or a server's (`GET /api/usage`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from milepost.cli.inputs import DbOption, JsonOption, ServerOption
from milepost.cli.output import Format, OutputOption, chosen, emit, out, remote
from milepost.cli.reads import runs

app = typer.Typer()


@app.command("usage")
def usage(
    db: DbOption = None,
    server: ServerOption = None,
    playbook: Annotated[str | None, typer.Option(help="Only this playbook path.")] = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Usage totals per playbook, provider and model: tokens (in, out) and cost."""
    with runs(server, db) as where:
        items: list[dict[str, Any]] = remote(lambda: where.usage(playbook))
    if (fmt := chosen(output, json_out)) is not Format.table:
        emit(items, fmt)
        return
    if not items:
        out.print("no usage reported" + (f" for {playbook}" if playbook else ""))
        return
    table = Table("playbook", "provider", "model", "tokens", "in", "out", "cost")
    for i in items:
        table.add_row(
            i["path"],
            i["provider"] or "-",
            i["model"] or "-",
            str(i["tokens"]),
            str(i["input_tokens"]),
            str(i["output_tokens"]),
            f"{i['cost']:g}",
        )
    out.print(table)
