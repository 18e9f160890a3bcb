"""Running playbooks on the local database: `run`, `resume` and `cancel`, with the live
table of steps a terminal shows while a run goes."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from milepost.cli.inputs import (
    DbOption,
    JsonOption,
    ServerOption,
    load_state,
    local_store,
    opened,
    read_workload,
    server_client,
)
from milepost.cli.output import err, fail, iso, out, remote, short
from milepost.core import events as ev
from milepost.core import state as st
from milepost.credentials import Vault
from milepost.engine import summaries
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.machine import LeasedIds, holder_name
from milepost.engine.orchestrator import Orchestrator
from milepost.engine.webhooks import Webhook
from milepost.errors import MilepostError, PlaybookInvalid
from milepost.playbook import load, yamllines
from milepost.settings import Settings
from milepost.store.port import DriverLease, LogMoved
from milepost.store.sqlite import SQLiteStore

app = typer.Typer()


class Progress:
    """A live table of steps, fed with events as they are committed."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.live: Live | None = None

    def table(self) -> Table:
        table = Table(title="milepost", expand=False)
        for col in ("step", "status", "runs", "done"):
            table.add_column(col)
        for name, row in self.rows.items():
            done = f"{row['done']}/{row['total']}" if row.get("total") is not None else ""
            table.add_row(name, row["status"], str(row["runs"]), done)
        return table

    def __call__(self, event: ev.Event) -> None:
        if not event.step:
            return
        row = self.rows.setdefault(event.step, {"status": "", "runs": 0, "done": 0, "total": None})
        if event.event_type == ev.STEP_ENTER:
            row.update(status="RUNNING", runs=row["runs"] + 1, done=0,
                       total=len(event.payload["items"]) if "items" in event.payload else None)
        elif event.event_type == ev.COMMAND_COMPLETED:
            row["done"] += 1
        elif event.event_type == ev.STEP_EXIT:
            row["status"] = event.status or ""
        if self.live is not None:
            self.live.update(self.table())


async def _drive(db: str | None, json_out: bool, start: Any) -> st.ExecutionState:
    settings = Settings()
    store = local_store(db)
    progress = Progress()
    # credentials need the key; without one a playbook that names a credential fails
    # with a message saying it is not registered
    vault = Vault.from_env(store) if os.environ.get("MILEPOST_SECRET_KEY") else None
    try:
        async with EmbeddedEngine(store, concurrency=settings.concurrency,
                                  python_workers=settings.python_workers,
                                  machine_id=settings.machine_id, vault=vault,
                                  driver_ttl=settings.driver_ttl,
                                  webhook=Webhook.from_settings(settings)) as engine:  # fmt: skip
            if not json_out and out.is_terminal:
                engine.subscribe(progress)
                with Live(progress.table(), console=out, refresh_per_second=8) as live:
                    progress.live = live
                    xid = await _started(start(engine))
                    return await engine.wait(xid)
            xid = await _started(start(engine))
            if not json_out:
                out.print(f"execution {xid} started")
            return await engine.wait(xid)
    finally:
        store.close()


async def _started(xid: Any) -> int:
    """`start(engine)` of `_drive` returns the id, or waits for it (resume's take-over)."""
    return int(await xid) if inspect.isawaitable(xid) else int(xid)


def _print_result(state: st.ExecutionState, json_out: bool) -> None:
    data = summaries.execution_summary(state)
    if json_out:
        typer.echo(json.dumps(data, default=str))
    else:
        colour = {"COMPLETED": "green", "FAILED": "red"}.get(state.status, "yellow")
        out.print(f"execution [bold]{state.execution_id}[/bold] "
                  f"[{colour}]{state.status}[/{colour}]", highlight=False)  # fmt: skip
        for name, step in data["steps"].items():
            out.print(f"  {name:<28} {step['status']:<10} {short(step['result'])}",
                      highlight=False, markup=False)  # fmt: skip
        if state.status == st.FAILED:
            out.print(f"[red]reason:[/red] {summaries.failure_reason(state)}", highlight=False)
    raise typer.Exit(0 if state.status == st.COMPLETED else 1)


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="Playbook YAML file.")],
    set_: Annotated[list[str], typer.Option("--set", help="Workload value KEY=VALUE.")] = [],  # noqa: B006
    payload: Annotated[str | None, typer.Option(help="Workload as a JSON object.")] = None,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Run a playbook to a terminal state (exit 0 COMPLETED, 1 FAILED, 2 invalid input)."""
    workload = read_workload(payload, set_)
    try:
        text = file.read_text()
    except OSError as exc:
        raise fail(f"cannot read {file}: {exc.strerror}") from None
    try:
        # read from outside, like a registered document: within the settings' limits
        playbook = load.load_text(text, source=str(file), limits=yamllines.Limits.of())
    except PlaybookInvalid as exc:
        # refused before anything is written: no execution exists, the run simply failed
        if json_out:
            typer.echo(json.dumps({"execution_id": None, "status": "FAILED",
                                   "error": {**exc.to_dict(), "reason": exc.message},
                                   "steps": {}}))  # fmt: skip
        raise fail(exc.message, code=1) from None
    try:
        state = asyncio.run(_drive(db, json_out, lambda e: e.start(playbook, text, workload)))
    except MilepostError as exc:
        raise fail(exc.message) from None
    _print_result(state, json_out)


@app.command()
def resume(execution_id: int, db: DbOption = None, json_out: JsonOption = False) -> None:
    """Continue an execution from its last event (after a crash or a kill).

    Exit 0 COMPLETED, 1 FAILED or CANCELLED (also for a run that had already ended: there
    is nothing to resume, and a script sees the run's outcome as `run` would report it),
    2 refused: another live process drives the run (its driver lease), or a server does.
    """
    with opened(db) as store:
        row = store.get_execution(execution_id)
    if row is None:
        raise fail(f"no execution {execution_id}")
    if row.status in st.TERMINAL:
        _print_ended(db, execution_id, row.updated_at, json_out)

    async def start(engine: EmbeddedEngine) -> int:
        await engine.take_over(execution_id, on_wait=_waiting_for)
        return execution_id

    try:
        state = asyncio.run(_drive(db, json_out, start))
    except MilepostError as exc:
        raise fail(exc.message) from None
    _print_result(state, json_out)


def _print_ended(db: str | None, execution_id: int, ended: float, json_out: bool) -> None:
    state = load_state(db, execution_id)
    message = (f"execution {execution_id} is {state.status} (ended {iso(ended)});"
               " nothing to resume")  # fmt: skip
    if json_out:
        err.print(message, highlight=False, markup=False, soft_wrap=True)
        typer.echo(json.dumps(summaries.execution_summary(state), default=str))
    else:
        out.print(message, highlight=False, markup=False)
        if state.status == st.FAILED:
            out.print(f"[red]reason:[/red] {summaries.failure_reason(state)}", highlight=False)
    raise typer.Exit(0 if state.status == st.COMPLETED else 1)


def _waiting_for(lease: DriverLease) -> None:
    err.print(f"execution {lease.execution_id} is driven by {lease.holder} until"
              f" {iso(lease.expires_at)}; waiting for that lease to expire (taken over) or"
              " to be renewed (refused)", highlight=False, markup=False, soft_wrap=True)  # fmt: skip


@app.command()
def cancel(execution_id: int, db: DbOption = None, server: ServerOption = None) -> None:
    """Ask a running execution to stop at the next step boundary.

    The process running it (`milepost run` or `resume`, or the server) notices within
    seconds, lets running steps finish, issues nothing new and ends the run CANCELLED.
    """
    client = server_client(server, db)
    if client is not None:
        with client:
            remote(lambda: client.cancel(execution_id))
        out.print(f"cancel requested for execution {execution_id}")
        return

    with opened(db) as store:
        machine_id = Settings().machine_id
        # the one id this makes must not be one a running `milepost run` makes too
        leased = None if machine_id is not None else LeasedIds(
            store, time.time, holder=holder_name("cancel"), ttl=30.0)  # fmt: skip
        try:
            request_cancel(store, execution_id, Orchestrator(
                store, machine_id=machine_id or 0, new_id=leased))  # fmt: skip
        finally:
            if leased is not None:
                leased.release()
    out.print(f"cancel requested for execution {execution_id}")


CANCEL_TRIES = 100
"""Reads of a busy run's log before `milepost cancel` gives up appending behind it."""


def request_cancel(store: SQLiteStore, execution_id: int, orchestrator: Orchestrator) -> None:
    """Append the request only to the log as it was read: a run that ended in between
    (another process writes it) takes nothing after its terminal event."""
    for _ in range(CANCEL_TRIES):
        # only the status and the watermark are read: a run sealed with a key this
        # process lacks can still be cancelled
        state = orchestrator.state(execution_id, workload=False)
        if state.terminal:
            raise fail(f"execution {execution_id} is already {state.status}")
        event = ev.new_event(orchestrator.new_id(), execution_id, ev.EXECUTION_CANCEL_REQUESTED,
                             orchestrator.clock())  # fmt: skip
        try:
            store.append([event], expect={execution_id: state.last_seq})
            return
        except LogMoved:
            orchestrator.forget(execution_id)
    raise fail(f"execution {execution_id} kept moving; cancel again")
