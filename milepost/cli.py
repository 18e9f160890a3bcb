"""The `milepost` command line."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine import report
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.orchestrator import deep_merge
from milepost.errors import MilepostError, PlaybookInvalid
from milepost.playbook import load
from milepost.settings import Settings, sqlite_path
from milepost.store.sqlite import SQLiteStore

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="milepost: run NoETL playbooks durably.")  # fmt: skip
out = Console(soft_wrap=True)
err = Console(stderr=True)

DbOption = Annotated[str | None, typer.Option(
    "--db", help="Database: a SQLite path or sqlite:///path "
    "[env: MILEPOST_DATABASE_URL; default .milepost/milepost.db]")]  # fmt: skip
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


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
    err.print(f"[red]error:[/red] {message}", highlight=False)
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
    try:
        async with EmbeddedEngine(store, concurrency=settings.concurrency,
                                  python_workers=settings.python_workers,
                                  machine_id=settings.machine_id) as engine:  # fmt: skip
            if not json_out and out.is_terminal:
                engine.subscribe(progress)
                with Live(progress.table(), console=out, refresh_per_second=8) as live:
                    progress.live = live
                    xid = start(engine)
                    return await engine.wait(xid)
            xid = start(engine)
            if not json_out:
                out.print(f"execution {xid} started")
            return await engine.wait(xid)
    finally:
        store.close()


def _print_result(state: st.ExecutionState, json_out: bool) -> None:
    data = report.summary(state)
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
            out.print(f"[red]reason:[/red] {report.reason(state)}", highlight=False)
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
        playbook = load.load_text(text, source=str(file))
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
    """Continue an execution from its last event (after a crash or a kill)."""

    def start(engine: EmbeddedEngine) -> int:
        engine.resume(execution_id)
        return execution_id

    try:
        state = asyncio.run(_drive(db, json_out, start))
    except MilepostError as exc:
        raise _fail(exc.message) from None
    _print_result(state, json_out)


@app.command()
def cancel(execution_id: int, db: DbOption = None) -> None:
    """Ask a running execution to stop at the next step boundary.

    The process running it (`milepost run` or `resume`) notices within a second, lets
    running steps finish, issues nothing new and ends the run CANCELLED.
    """
    from milepost.engine.orchestrator import Orchestrator

    store = _store(db)
    try:
        orchestrator = Orchestrator(store, machine_id=Settings().machine_id)
        state = orchestrator.state(execution_id)
        if state.terminal:
            raise _fail(f"execution {execution_id} is already {state.status}")
        store.append([ev.new_event(orchestrator.new_id(), execution_id,
                                   ev.EXECUTION_CANCEL_REQUESTED, orchestrator.clock())])  # fmt: skip
    finally:
        store.close()
    out.print(f"cancel requested for execution {execution_id}")


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
    store = _store(db)
    try:
        rows = store.list_executions(status=status, limit=limit)
    finally:
        store.close()
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
    store = _store(db)
    try:
        events = store.load(execution_id)
    finally:
        store.close()
    if not events:
        raise _fail(f"no execution {execution_id}")
    return st.fold(None, events)


@app.command()
def status(execution_id: int, db: DbOption = None, json_out: JsonOption = False) -> None:
    """Show an execution's status, error and steps."""
    state = _load_state(db, execution_id)
    data = report.summary(state)
    if json_out:
        typer.echo(json.dumps(data, default=str))
        return
    out.print(f"execution {execution_id} {state.path}: [bold]{state.status}[/bold]",
              highlight=False)  # fmt: skip
    if state.status == st.FAILED:
        out.print(f"[red]reason:[/red] {report.reason(state)}", highlight=False)
    table = Table("step", "status", "runs", "result")
    for name, step in data["steps"].items():
        table.add_row(name, step["status"], str(step["runs"]), _short(step["result"], 70))
    out.print(table)


@app.command()
def events(execution_id: int, db: DbOption = None, json_out: JsonOption = False) -> None:
    """Print an execution's event log."""
    store = _store(db)
    try:
        log = store.load(execution_id)
    finally:
        store.close()
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
def conformance(
    directory: Annotated[Path, typer.Argument(help="Folder with expectations.yaml and playbooks/.")],
    pg: Annotated[str, typer.Option("--pg", help="PostgreSQL for `postgres` fixtures.")] = (
        "postgresql://postgres@127.0.0.1:5432/test"),
    only: Annotated[list[str], typer.Option(help="Run only entries matching this (repeatable).")] = [],  # noqa: B006
    json_out: JsonOption = False,
) -> None:
    """Run a NoETL conformance suite; one line per playbook, then `N passed, M failed, K skipped`."""
    from milepost.conformance import runner

    raise typer.Exit(runner.main(directory, pg_url=pg, json_out=json_out, only=only or None))


@app.command()
def bench(
    workload: Annotated[str, typer.Argument(help="W1 (chain), W2 (fan-out + sum) or W3 (N runs).")],
    n: Annotated[int, typer.Argument(help="W1 chain length, W2 width, W3 number of runs.")],
    reps: Annotated[int, typer.Option(help="Timed repetitions.")] = 3,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up runs of size min(N, 5).")] = 1,
    variant: Annotated[str, typer.Option(help="default = embedded on SQLite.")] = "default",
) -> None:
    """Run a peer-harness workload and print its JSON lines (shared/bench/README.md)."""
    from milepost import bench as bench_mod

    try:
        ok = bench_mod.run(workload.upper(), n, reps=reps, warmup=warmup, variant=variant)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    raise typer.Exit(0 if ok else 1)


def main() -> None:
    try:
        app()
    except MilepostError as exc:
        err.print(f"[red]error:[/red] {exc.message}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
