"""Reading executions, from the local database or a server: `list`, `status`, `events`."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.table import Table

from milepost.cli.inputs import (
    DbOption,
    JsonOption,
    ServerOption,
    load_state,
    opened,
    server_client,
)
from milepost.cli.output import fail, iso, out, print_status, remote, short
from milepost.engine import summaries, worker_pools

app = typer.Typer()


@app.command("list")
def list_(db: DbOption = None, json_out: JsonOption = False,
          status: Annotated[str | None, typer.Option(help="Only this status.")] = None,
          limit: int = 50) -> None:  # fmt: skip
    """List executions, newest first."""
    with opened(db) as store:
        rows = store.list_executions(status=status, limit=limit)
    items = [{"execution_id": str(r.execution_id), "playbook": r.path, "status": r.status,
              "start": iso(r.created_at)} for r in rows]  # fmt: skip
    if json_out:
        typer.echo(json.dumps(items))
        return
    table = Table("execution", "playbook", "status", "start")
    for item in items:
        table.add_row(item["execution_id"], item["playbook"], item["status"], item["start"])
    out.print(table)


@app.command()
def status(execution_id: int, db: DbOption = None, server: ServerOption = None,
           json_out: JsonOption = False) -> None:  # fmt: skip
    """Show an execution's status, error and steps (local database or a server)."""
    client = server_client(server, db)
    if client is not None:
        with client:
            print_status(remote(lambda: client.status(execution_id)), json_out)
        return
    state = load_state(db, execution_id)
    summary = summaries.execution_summary(state)
    if not state.terminal:  # a queued command of a pool no live worker serves, as a server says
        with opened(db) as store:
            missing = worker_pools.missing(store, time.time(), execution_id)
        summary = summaries.with_missing_workers(summary, missing)
    print_status(summary, json_out)


@app.command()
def events(execution_id: int, db: DbOption = None, server: ServerOption = None,
           json_out: JsonOption = False) -> None:  # fmt: skip
    """Print an execution's event log (local database or a server)."""
    client = server_client(server, db)
    if client is not None:
        with client:
            items = remote(lambda: client.events(execution_id))
        if json_out:
            for item in items:
                typer.echo(json.dumps(item, default=str))
            return
        table = Table("seq", "event", "step", "status", "result")
        for item in items:
            table.add_row(str(item.get("seq", "")), item["event_type"], item.get("step") or "",
                          item.get("status") or "", short(item.get("result"), 60))  # fmt: skip
        out.print(table)
        return
    with opened(db) as store:
        log = store.load(execution_id)
    if not log:
        raise fail(f"no execution {execution_id}")
    if json_out:
        for e in log:
            typer.echo(json.dumps({"seq": e.seq, "event_id": str(e.event_id),
                                   "event_type": e.event_type, "step": e.step,
                                   "status": e.status, "result": e.envelope_result(),
                                   "meta": e.meta, "created_at": iso(e.created_at)},
                                  default=str))  # fmt: skip
        return
    table = Table("seq", "time", "event", "step", "status", "payload")
    for e in log:
        table.add_row(str(e.seq), iso(e.created_at)[11:], e.event_type, e.step or "",
                      e.status or "", short(e.payload, 60))  # fmt: skip
    out.print(table)
