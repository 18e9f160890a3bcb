"""`milepost doctor ID`: why a run is not moving, or why it ended, from the local database
or a server (`engine.diagnosis`): one finding per line, the most likely cause first."""

from __future__ import annotations

import time
from typing import Any

import typer

from milepost.cli.inputs import DbOption, JsonOption, ServerOption, opened, server_client
from milepost.cli.output import Format, OutputOption, chosen, emit, out, remote

app = typer.Typer()



@app.command()
def doctor(execution_id: int, db: DbOption = None, server: ServerOption = None,
           output: OutputOption = None, json_out: JsonOption = False) -> None:  # fmt: skip
    """Say why a run is not moving (an approval and who may decide, a claimed command and
    its lease, a pool with no live worker, a loop, a retry timer, a budget or stall limit
    near), or for an ended run that it completed or its first error."""
    client = server_client(server, db)
    if client is not None:
        with client:
            found = remote(lambda: client.diagnosis(execution_id))
    else:
        found = remote(lambda: _local(db, execution_id))
    if (fmt := chosen(output, json_out)) is not Format.table:  # table: a finding a line
        emit(found, fmt)
        return
    for line in lines(found):
        out.print(line, highlight=False, markup=False, soft_wrap=True)


def _local(db: str | None, execution_id: int) -> dict[str, Any]:
    from milepost.engine import diagnosis

    with opened(db) as store:
        return diagnosis.local(store, execution_id, time.time())


def lines(found: dict[str, Any]) -> list[str]:
    """The head (`execution ID PATH: STATUS`), then `kind: message` per finding."""
    head = f"execution {found['execution_id']} {found['playbook']}: {found['status']}"
    return [head, *(f"{f['kind']}: {f['message']}" for f in found["findings"])]
