"""`milepost doctor ID`: why a run is not moving, or why it ended, from the local database
or a server (`engine.diagnosis`): one finding per line, the most likely cause first."""

from __future__ import annotations

from typing import Any

import typer

from milepost.cli.inputs import DbOption, JsonOption, ServerOption
from milepost.cli.output import Format, OutputOption, chosen, emit, out, remote
from milepost.cli.reads import runs

app = typer.Typer()


@app.command()
def doctor(
    execution_id: int,
    db: DbOption = None,
    server: ServerOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Say why a run is not moving (an approval and who may decide, a claimed command and
    its lease, a pool with no live worker, a loop, a retry timer, a budget or stall limit
    near), or for an ended run that it completed or its first error."""
    with runs(server, db) as where:
        found = remote(lambda: where.diagnosis(execution_id))
    if (fmt := chosen(output, json_out)) is not Format.table:  # table: a finding a line
        emit(found, fmt)
        return
    for line in lines(found):
        out.print(line, highlight=False, markup=False, soft_wrap=True)


def lines(found: dict[str, Any]) -> list[str]:
    """The head (`execution ID PATH: STATUS`), then `kind: message` per finding."""
    head = f"execution {found['execution_id']} {found['playbook']}: {found['status']}"
    return [head, *(f"{f['kind']}: {f['message']}" for f in found["findings"])]
