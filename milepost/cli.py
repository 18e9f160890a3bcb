"""The `milepost` command line."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from milepost.client import MilepostClient
from milepost.core import events as ev
from milepost.core import state as st
from milepost.credentials import Vault
from milepost.credentials import check_name as check_credential_name
from milepost.engine import summaries
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.machine import LeasedIds, holder_name
from milepost.engine.orchestrator import Orchestrator, deep_merge
from milepost.errors import MilepostError, PlaybookInvalid
from milepost.playbook import load, yamllines
from milepost.settings import Settings, sqlite_path
from milepost.store.port import DriverLease, LogMoved
from milepost.store.sqlite import SQLiteStore

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="milepost: run NoETL playbooks durably.")  # fmt: skip
out = Console(soft_wrap=True)
err = Console(stderr=True)

DbOption = Annotated[str | None, typer.Option(
    "--db", help="Database: a SQLite path or sqlite:///path "
    "[env: MILEPOST_DATABASE_URL; default .milepost/milepost.db]")]  # fmt: skip
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
ServerOption = Annotated[str | None, typer.Option(
    "--server", help="A milepost server URL [env: MILEPOST_SERVER_URL]; token from MILEPOST_TOKEN.")]


@contextlib.contextmanager
def _opened(db: str | None) -> Iterator[SQLiteStore]:
    store = _store(db)
    try:
        yield store
    finally:
        store.close()


def _store(db: str | None) -> SQLiteStore:
    settings = Settings()
    return SQLiteStore(sqlite_path(db, settings), synchronous=settings.sqlite_synchronous)


def _parse_sets(sets: list[str]) -> dict[str, Any]:
    """`--set a.b=5` -> {"a": {"b": 5}}; values are read as YAML scalars (5 is an int)."""
    result: dict[str, Any] = {}
    for item in sets:
        if "=" not in item:
            raise typer.BadParameter(f"--set {item!r}: expected KEY=VALUE", param_hint="--set")
        key, _, raw = item.partition("=")
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        target = result
        parts = key.strip().split(".")
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return result


def _workload(payload: str | None, sets: list[str]) -> dict[str, Any]:
    base: dict[str, Any] = {}
    if payload:
        try:
            base = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(f"not JSON: {exc}", param_hint="--payload") from None
        if not isinstance(base, dict):
            raise typer.BadParameter("must be a JSON object", param_hint="--payload")
    return deep_merge(base, _parse_sets(sets))


def _fail(message: str, code: int = 2) -> typer.Exit:
    # one line however long (a holder, a time): a script can match it
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _short(value: Any, width: int = 90) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


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
    store = _store(db)
    progress = Progress()
    # credentials need the key; without one a playbook that names a credential fails
    # with a message saying it is not registered
    vault = Vault.from_env(store) if os.environ.get("MILEPOST_SECRET_KEY") else None
    try:
        async with EmbeddedEngine(store, concurrency=settings.concurrency,
                                  python_workers=settings.python_workers,
                                  machine_id=settings.machine_id, vault=vault,
                                  driver_ttl=settings.driver_ttl) as engine:  # fmt: skip
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
            out.print(f"  {name:<28} {step['status']:<10} {_short(step['result'])}",
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
    workload = _workload(payload, set_)
    try:
        text = file.read_text()
    except OSError as exc:
        raise _fail(f"cannot read {file}: {exc.strerror}") from None
    try:
        # read from outside, like a registered document: within the settings' limits
        playbook = load.load_text(text, source=str(file), limits=yamllines.Limits.of())
    except PlaybookInvalid as exc:
        # refused before anything is written: no execution exists, the run simply failed
        if json_out:
            typer.echo(json.dumps({"execution_id": None, "status": "FAILED",
                                   "error": {**exc.to_dict(), "reason": exc.message},
                                   "steps": {}}))  # fmt: skip
        raise _fail(exc.message, code=1) from None
    try:
        state = asyncio.run(_drive(db, json_out, lambda e: e.start(playbook, text, workload)))
    except MilepostError as exc:
        raise _fail(exc.message) from None
    _print_result(state, json_out)


@app.command()
def resume(execution_id: int, db: DbOption = None, json_out: JsonOption = False) -> None:
    """Continue an execution from its last event (after a crash or a kill).

    Exit 0 COMPLETED, 1 FAILED or CANCELLED (also for a run that had already ended: there
    is nothing to resume, and a script sees the run's outcome as `run` would report it),
    2 refused: another live process drives the run (its driver lease), or a server does.
    """
    with _opened(db) as store:
        row = store.get_execution(execution_id)
    if row is None:
        raise _fail(f"no execution {execution_id}")
    if row.status in st.TERMINAL:
        _print_ended(db, execution_id, row.updated_at, json_out)

    async def start(engine: EmbeddedEngine) -> int:
        await engine.take_over(execution_id, on_wait=_waiting_for)
        return execution_id

    try:
        state = asyncio.run(_drive(db, json_out, start))
    except MilepostError as exc:
        raise _fail(exc.message) from None
    _print_result(state, json_out)


def _print_ended(db: str | None, execution_id: int, ended: float, json_out: bool) -> None:
    state = _load_state(db, execution_id)
    message = (f"execution {execution_id} is {state.status} (ended {_iso(ended)});"
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
              f" {_iso(lease.expires_at)}; waiting for that lease to expire (taken over) or"
              " to be renewed (refused)", highlight=False, markup=False, soft_wrap=True)  # fmt: skip


@app.command()
def cancel(execution_id: int, db: DbOption = None, server: ServerOption = None) -> None:
    """Ask a running execution to stop at the next step boundary.

    The process running it (`milepost run` or `resume`, or the server) notices within
    seconds, lets running steps finish, issues nothing new and ends the run CANCELLED.
    """
    client = _client(server, db)
    if client is not None:
        with client:
            _remote(lambda: client.cancel(execution_id))
        out.print(f"cancel requested for execution {execution_id}")
        return

    with _opened(db) as store:
        machine_id = Settings().machine_id
        # the one id this makes must not be one a running `milepost run` makes too
        leased = None if machine_id is not None else LeasedIds(
            store, time.time, holder=holder_name("cancel"), ttl=30.0)  # fmt: skip
        try:
            _request_cancel(store, execution_id, Orchestrator(
                store, machine_id=machine_id or 0, new_id=leased))  # fmt: skip
        finally:
            if leased is not None:
                leased.release()
    out.print(f"cancel requested for execution {execution_id}")


CANCEL_TRIES = 100
"""Reads of a busy run's log before `milepost cancel` gives up appending behind it."""


def _request_cancel(store: SQLiteStore, execution_id: int, orchestrator: Orchestrator) -> None:
    """Append the request only to the log as it was read: a run that ended in between
    (another process writes it) takes nothing after its terminal event."""
    for _ in range(CANCEL_TRIES):
        # only the status and the watermark are read: a run sealed with a key this
        # process lacks can still be cancelled
        state = orchestrator.state(execution_id, workload=False)
        if state.terminal:
            raise _fail(f"execution {execution_id} is already {state.status}")
        event = ev.new_event(orchestrator.new_id(), execution_id, ev.EXECUTION_CANCEL_REQUESTED,
                             orchestrator.clock())  # fmt: skip
        try:
            store.append([event], expect={execution_id: state.last_seq})
            return
        except LogMoved:
            orchestrator.forget(execution_id)
    raise _fail(f"execution {execution_id} kept moving; cancel again")


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


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


@app.command("list")
def list_(db: DbOption = None, json_out: JsonOption = False,
          status: Annotated[str | None, typer.Option(help="Only this status.")] = None,
          limit: int = 50) -> None:  # fmt: skip
    """List executions, newest first."""
    with _opened(db) as store:
        rows = store.list_executions(status=status, limit=limit)
    items = [{"execution_id": str(r.execution_id), "playbook": r.path, "status": r.status,
              "start": _iso(r.created_at)} for r in rows]  # fmt: skip
    if json_out:
        typer.echo(json.dumps(items))
        return
    table = Table("execution", "playbook", "status", "start")
    for item in items:
        table.add_row(item["execution_id"], item["playbook"], item["status"], item["start"])
    out.print(table)


def _load_state(db: str | None, execution_id: int) -> st.ExecutionState:
    with _opened(db) as store:
        events = store.load(execution_id)
    if not events:
        raise _fail(f"no execution {execution_id}")
    return st.fold(None, events)


def _client(server: str | None, db: str | None) -> MilepostClient | None:
    """A client when the command should talk to a server: `--server`, or
    MILEPOST_SERVER_URL when no `--db` was given; None means the local database."""
    url = server or (None if db else os.environ.get("MILEPOST_SERVER_URL"))
    return MilepostClient(url) if url else None


def _print_status(data: dict[str, Any], json_out: bool) -> None:
    if json_out:
        typer.echo(json.dumps(data, default=str))
        return
    out.print(f"execution {data['execution_id']} {data.get('playbook') or ''}: "
              f"[bold]{data['status']}[/bold]", highlight=False)  # fmt: skip
    if data["status"] == st.FAILED and data.get("error"):
        error = data["error"]
        out.print(f"[red]reason:[/red] {error.get('reason') or error.get('message')}",
                  highlight=False)  # fmt: skip
    table = Table("step", "status", "runs", "result")
    for name, step in data["steps"].items():
        table.add_row(name, step["status"], str(step.get("runs", "")), _short(step["result"], 70))
    out.print(table)


@app.command()
def status(execution_id: int, db: DbOption = None, server: ServerOption = None,
           json_out: JsonOption = False) -> None:  # fmt: skip
    """Show an execution's status, error and steps (local database or a server)."""
    client = _client(server, db)
    if client is not None:
        with client:
            _print_status(_remote(lambda: client.status(execution_id)), json_out)
        return
    _print_status(summaries.execution_summary(_load_state(db, execution_id)), json_out)


def _remote(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except MilepostError as exc:
        raise _fail(exc.message) from None


@app.command()
def events(execution_id: int, db: DbOption = None, server: ServerOption = None,
           json_out: JsonOption = False) -> None:  # fmt: skip
    """Print an execution's event log (local database or a server)."""
    client = _client(server, db)
    if client is not None:
        with client:
            items = _remote(lambda: client.events(execution_id))
        if json_out:
            for item in items:
                typer.echo(json.dumps(item, default=str))
            return
        table = Table("seq", "event", "step", "status", "result")
        for item in items:
            table.add_row(str(item.get("seq", "")), item["event_type"], item.get("step") or "",
                          item.get("status") or "", _short(item.get("result"), 60))  # fmt: skip
        out.print(table)
        return
    with _opened(db) as store:
        log = store.load(execution_id)
    if not log:
        raise _fail(f"no execution {execution_id}")
    if json_out:
        for e in log:
            typer.echo(json.dumps({"seq": e.seq, "event_id": str(e.event_id),
                                   "event_type": e.event_type, "step": e.step,
                                   "status": e.status, "result": e.envelope_result(),
                                   "meta": e.meta, "created_at": _iso(e.created_at)},
                                  default=str))  # fmt: skip
        return
    table = Table("seq", "time", "event", "step", "status", "payload")
    for e in log:
        table.add_row(str(e.seq), _iso(e.created_at)[11:], e.event_type, e.step or "",
                      e.status or "", _short(e.payload, 60))  # fmt: skip
    out.print(table)


@app.command()
def register(file: Annotated[Path, typer.Argument(help="Playbook YAML file.")],
             server: ServerOption = None) -> None:  # fmt: skip
    """Register a playbook in a server's catalog (a new version when its text changed)."""
    try:
        text = file.read_text()
    except OSError as exc:
        raise _fail(f"cannot read {file}: {exc.strerror}") from None
    with MilepostClient(server) as client:
        entry = _remote(lambda: client.register(text))
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
    workload = _workload(payload, set_)
    with MilepostClient(server) as client:
        xid = _remote(lambda: client.execute(path, workload, version=version))
        if not wait:
            typer.echo(json.dumps({"execution_id": str(xid)}) if json_out else f"execution {xid}")
            return
        data = _remote(lambda: client.wait(xid))  # the final status reply
    _print_status(data, json_out)
    raise typer.Exit(0 if data["status"] == st.COMPLETED else 1)


@app.command()
def worker(
    server: ServerOption = None,
    concurrency: Annotated[int | None, typer.Option(help="Commands at once [env: MILEPOST_CONCURRENCY; 16].")] = None,
    pool: Annotated[str | None, typer.Option(help="Pool to serve [env: MILEPOST_POOL; default].")] = None,
) -> None:
    """Claim and run commands from a server until SIGTERM (then finish, release, exit)."""
    from milepost.worker.main import worker_main

    raise typer.Exit(worker_main(server, concurrency=concurrency, pool=pool))


@app.command()
def conformance(
    directory: Annotated[Path, typer.Argument(help="Folder with expectations.yaml and playbooks/.")],
    pg: Annotated[str, typer.Option("--pg", help="PostgreSQL for `postgres` fixtures.")] = (
        "postgresql://postgres@127.0.0.1:5432/test"),
    only: Annotated[list[str], typer.Option(help="Run only entries matching this (repeatable).")] = [],  # noqa: B006
    server: ServerOption = None,
    cluster: Annotated[bool, typer.Option(
        "--cluster", help="Start a server on a fresh database of --pg and two workers, "
        "run through them, remove them.")] = False,
    json_out: JsonOption = False,
) -> None:
    """Run a NoETL conformance suite; one line per playbook, then `N passed, M failed, K skipped`.

    Embedded by default; `--server URL` (token from MILEPOST_TOKEN) runs it through a
    running server and its workers; `--cluster` starts such a server itself.
    """
    from milepost.conformance import runner

    if cluster:
        from milepost.conformance.cluster import LocalCluster

        with LocalCluster(pg) as local:
            out.print(f"cluster: server {local.url}, database {local.database}, "
                      f"{local.workers} workers", highlight=False)  # fmt: skip
            raise typer.Exit(runner.main(directory, pg_url=pg, json_out=json_out,
                                         only=only or None, server=local.url,
                                         token=local.token))  # fmt: skip
    raise typer.Exit(runner.main(directory, pg_url=pg, json_out=json_out, only=only or None,
                                 server=server))  # fmt: skip


@app.command()
def bench(
    workload: Annotated[str, typer.Argument(help="W1 (chain), W2 (fan-out + sum) or W3 (N runs).")],
    n: Annotated[int, typer.Argument(help="W1 chain length, W2 width, W3 number of runs.")],
    reps: Annotated[int, typer.Option(help="Timed repetitions.")] = 3,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up runs of size min(N, 5).")] = 1,
    variant: Annotated[str, typer.Option(
        help="default = embedded on SQLite; server = milepost server on PostgreSQL + 2 workers.")] = "default",
) -> None:
    """Run a peer-harness workload and print its JSON lines (shared/bench/README.md).

    `milepost bench INGEST N` instead measures the events/s that a server's
    `POST /api/events/batch` sustains (N batches of 100 events).
    """
    from milepost import bench as bench_mod

    if workload.upper() == "INGEST":
        typer.echo(json.dumps(bench_mod.ingest(batches=n)))
        return
    try:
        ok = bench_mod.run(workload.upper(), n, reps=reps, warmup=warmup, variant=variant)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    raise typer.Exit(0 if ok else 1)


# -- server side: `server`, `token create`, `db upgrade`, `secret-key` ---------------------

ServerDbOption = Annotated[str | None, typer.Option(
    "--db", help="Database URL: a SQLite path, sqlite:///path or postgresql://user@host/db "
    "[env: MILEPOST_DATABASE_URL, or MILEPOST_DATABASE_URLS for shards; default "
    ".milepost/milepost.db]")]  # fmt: skip


def _server_settings(db: str | None) -> Settings:
    """Settings from the environment, with `--db` (when given) replacing both URL variables."""
    if db:
        return Settings(database_url=db, database_urls=None)
    return Settings()


def _open_server_store(db: str | None) -> Any:
    from milepost.store import factory

    return factory.open_store(settings=_server_settings(db))


@app.command()
def server(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8082,
    db: ServerDbOption = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    access_log: Annotated[bool, typer.Option(
        help="Log every request (workers make several per step: off by default; the "
             "server logs what it does, and /metrics counts requests).")] = False,
) -> None:
    """Run the HTTP server (docs/server-contract.md); needs MILEPOST_SECRET_KEY.

    Other settings: MILEPOST_NATS_URL (worker wake-ups), MILEPOST_LEASE_SECONDS,
    MILEPOST_MACHINE_ID (distinct per server on one database; unset, the server leases
    one from the database).
    """
    import uvicorn

    from milepost.api.app import create_app
    from milepost.credentials import SecretKeyMissing, parse_keys

    settings = _server_settings(db)
    if not (settings.secret_key or "").strip():
        raise _fail(SecretKeyMissing().message)
    parse_keys(settings.secret_key or "")  # a malformed key fails here, before the port opens
    # a worker-channel message between the two limits gets its 413 reply (the worker then
    # sends the batch's reports one by one); uvicorn closes the socket on a larger frame
    uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level,
                access_log=access_log, ws_max_size=2 * settings.max_body_bytes)  # fmt: skip


token_app = typer.Typer(no_args_is_help=True, help="API tokens.")
app.add_typer(token_app, name="token")


@token_app.command("create")
def token_create(
    role: Annotated[str, typer.Option(help="admin, operator, approver, worker or viewer.")],
    name: Annotated[str | None, typer.Option(help="A label for the token.")] = None,
    db: ServerDbOption = None,
) -> None:
    """Create an API token and print it (once: only its SHA-256 is stored)."""
    from milepost.api import auth

    if role not in auth.ROLES:
        raise _fail(f"unknown role {role!r}: use one of {', '.join(auth.ROLES)}")
    store = _open_server_store(db)  # migrated as it opens
    try:
        token = auth.create_token(store, role, name, time.time())
    finally:
        store.close()
    typer.echo(token)


db_app = typer.Typer(no_args_is_help=True, help="Database maintenance.")
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(db: ServerDbOption = None) -> None:
    """Migrate the database (every shard) to the latest schema."""
    from milepost.store import factory

    typer.echo(factory.upgrade(settings=_server_settings(db)))


credential_app = typer.Typer(no_args_is_help=True,
                             help="Credentials of the local database, encrypted with MILEPOST_SECRET_KEY.")
app.add_typer(credential_app, name="credential")


def _vault(db: str | None) -> tuple[Any, Vault]:
    store = _store(db)
    try:
        return store, Vault.from_env(store)
    except MilepostError:
        store.close()
        raise


@credential_app.command("set")
def credential_set(
    name: str,
    type_: Annotated[str, typer.Option("--type", help="postgres, generic, ...")],
    data: Annotated[str, typer.Option(help="The fields as a JSON object.")],
    db: DbOption = None,
) -> None:
    """Register or replace a credential for `auth:` and keychain entries."""
    try:
        check_credential_name(name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="NAME") from None
    try:
        fields = json.loads(data)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="--data") from None
    if not isinstance(fields, dict):
        raise typer.BadParameter("must be a JSON object", param_hint="--data")
    store, vault = _vault(db)
    try:
        vault.put(name, type_, fields)
    finally:
        store.close()
    out.print(f"credential {name} ({type_}) stored, encrypted", highlight=False)


@credential_app.command("list")
def credential_list(db: DbOption = None, json_out: JsonOption = False) -> None:
    """Names and types of the stored credentials (never their values)."""
    store, vault = _vault(db)
    try:
        items = vault.list()
    finally:
        store.close()
    if json_out:
        typer.echo(json.dumps(items, default=str))
        return
    table = Table("name", "type")
    for item in items:
        table.add_row(item["name"], item["type"])
    out.print(table)


@credential_app.command("delete")
def credential_delete(name: str, db: DbOption = None) -> None:
    """Remove a credential."""
    store, vault = _vault(db)
    try:
        deleted = vault.delete(name)
    finally:
        store.close()
    if not deleted:
        raise _fail(f"no credential {name!r}")
    out.print(f"credential {name} deleted", highlight=False)


@app.command("secret-key")
def secret_key() -> None:
    """Print a new key for MILEPOST_SECRET_KEY (encrypts credentials at rest)."""
    from milepost.credentials import new_key

    typer.echo(new_key())


def main() -> None:
    try:
        app()
    except MilepostError as exc:
        err.print(f"[red]error:[/red] {exc.message}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
