"""Running playbooks on the local database: `run`, `resume` and `cancel`, with the live
table of steps a terminal shows while a run goes."""

from __future__ import annotations

import asyncio
import enum
import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live

from milepost import telemetry
from milepost.cli import exit_codes
from milepost.cli.inputs import (
    DbOption,
    JsonOption,
    OutputOption,
    ServerOption,
    existing_store,
    load_state,
    local_identity,
    local_store,
    one_shot_engine,
    opened,
    read_playbook,
    read_workload,
    server_client,
)
from milepost.cli.output import (
    Format,
    chosen,
    emit,
    err,
    exit_code,
    fail,
    iso,
    out,
    remote,
    short,
    usage_text,
)
from milepost.cli.progress import ApprovalLines, Progress, decide_commands, resume_command
from milepost.core import approval_state as ap
from milepost.core import cancellation
from milepost.core import events as ev
from milepost.core import state as st
from milepost.credentials import Vault
from milepost.engine import behind, summaries, unattended
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.errors import AlreadyTerminal
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.orchestrator import Orchestrator
from milepost.engine.webhooks import Webhook
from milepost.errors import ConcurrencyConflict, MilepostError, PlaybookInvalid
from milepost.playbook import load, scripts, yamllines
from milepost.settings import Settings
from milepost.store.port import DriverLease, Store

app = typer.Typer()


@dataclass(slots=True)
class Drive:
    """One `run` or `resume`: where, how it prints, and the run once it is known (what a
    Ctrl-C leaves behind is said about it)."""

    db: str | None
    fmt: Format
    execution_id: int | None = None
    says: str | None = "started"
    """The line off a terminal once the run is known (`execution N started`); None: none
    (the command said what it does before)."""
    existing: bool = False
    """The database must be there already (`restart`, `rerun`: of a run it holds)."""

    @property
    def json_out(self) -> bool:
        """A document goes to stdout at the end: everything else to stderr."""
        return self.fmt is not Format.table


async def _drive(drive: Drive, start: Any) -> st.ExecutionState:
    settings = Settings()
    telemetry.from_settings(settings, service="milepost-run")  # a bad setting: before the store
    store = existing_store(drive.db) if drive.existing else local_store(drive.db)
    # credentials need the key; without one a playbook that names a credential fails
    # with a message saying it is not registered
    vault = Vault.from_env(store) if os.environ.get("MILEPOST_SECRET_KEY") else None
    try:
        async with EmbeddedEngine(
            store,
            concurrency=settings.concurrency,
            python_workers=settings.python_workers,
            python_idle_seconds=settings.python_idle_seconds,
            machine_id=settings.machine_id,
            vault=vault,
            driver_ttl=settings.driver_ttl,
            lease_s=settings.lease_seconds,
            default_timeout=settings.default_timeout,
            log_cap=settings.log_cap_bytes,
            webhook=Webhook.from_settings(settings),
        ) as engine:
            if not drive.json_out and out.is_terminal:
                progress = Progress(drive.db)
                engine.subscribe(progress)
                with Live(progress, console=out, refresh_per_second=4):
                    drive.execution_id = await _started(start(engine))
                    return await engine.wait(drive.execution_id)
            # off a terminal approvals are lines; with --json on stderr, stdout is the JSON
            engine.subscribe(ApprovalLines(err if drive.json_out else out, drive.db))
            drive.execution_id = await _started(start(engine))
            if not drive.json_out and drive.says is not None:
                out.print(f"execution {drive.execution_id} {drive.says}")
            return await engine.wait(drive.execution_id)
    finally:
        store.close()


def _driven(drive: Drive, start: Any) -> st.ExecutionState:
    """`_drive` to the end of the run, or to a Ctrl-C: the run is left as it is (its
    driver lease released on the way out) and the user is told how to go on."""
    try:
        return asyncio.run(_drive(drive, start))
    except KeyboardInterrupt:
        raise _interrupted(drive) from None
    except MilepostError as exc:  # a database that went away is 3, like every command's
        raise fail(exc.message, exit_code(exc)) from None


def _interrupted(drive: Drive) -> typer.Exit:
    xid = drive.execution_id
    if xid is None:
        err.print("interrupted before the run started", highlight=False)
        return typer.Exit(exit_codes.INTERRUPTED)
    state = load_state(drive.db, xid)
    if state.terminal:
        err.print(f"interrupted; execution {xid} is {state.status}", highlight=False)
        return typer.Exit(exit_codes.INTERRUPTED)
    # a Ctrl-C of `cancel` finishing a run leaves its request (and what was undone) in place
    kept = "its cancel stays requested" if state.cancel_requested else "nothing was cancelled"
    err.print(
        f"interrupted: execution {xid} is left {state.status} as it is ({kept});"
        " another process may drive it now",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    for approval in sorted(state.approvals.values(), key=lambda a: a.approval_id):
        if approval.status == ap.PENDING:
            approve, deny = decide_commands(approval.approval_id, drive.db)
            err.print(
                f"approval {approval.approval_id} (step {approval.step}) waits for a"
                f" decision: {approve}  or  {deny}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    err.print(
        f"to go on: {resume_command(xid, drive.db)}", highlight=False, markup=False, soft_wrap=True
    )
    return typer.Exit(exit_codes.INTERRUPTED)


async def _started(xid: Any) -> int:
    """`start(engine)` of `_drive` returns the id, or waits for it (resume's take-over)."""
    return int(await xid) if inspect.isawaitable(xid) else int(xid)


def _print_result(state: st.ExecutionState, fmt: Format) -> None:
    _show_result(state, fmt)
    raise typer.Exit(exit_codes.of_run(state.status))


def _show_result(state: st.ExecutionState, fmt: Format) -> None:
    data = summaries.execution_summary(state)
    if fmt is not Format.table:
        emit(data, fmt)
    else:
        colour = {"COMPLETED": "green", "FAILED": "red"}.get(state.status, "yellow")
        out.print(
            f"execution [bold]{state.execution_id}[/bold] [{colour}]{state.status}[/{colour}]",
            highlight=False,
        )
        torn = (data.get("teardown") or {}).get("items", ())
        last = {i["step"] for i in torn}  # in the order they ran: after the compensations
        for name, step in data["steps"].items():
            if name not in last:
                out.print(
                    f"  {name:<28} {step['status']:<10} {short(step['result'])}",
                    highlight=False,
                    markup=False,
                )
        for item in (data.get("compensation") or {}).get("items", []):
            shown = (item.get("error") or {}).get("message") or short(item.get("result"))
            out.print(
                f"  {item['compensation'] + ' (undoes ' + item['step'] + ')':<28} "
                f"{item['status']:<10} {shown}",
                highlight=False,
                markup=False,
            )
        for item in torn:
            shown = (item.get("error") or {}).get("message") or short(item.get("result"))
            out.print(
                f"  {item['step'] + ' (teardown)':<28} {item['status']:<10} {shown}",
                highlight=False,
                markup=False,
            )
        failed = [i["step"] for i in torn if i["status"] == st.FAILED]
        if failed:
            out.print(
                f"teardown failed: {', '.join(failed)} (the run's status stays"
                f" {state.status}; `milepost describe {state.execution_id}` shows why)",
                highlight=False,
                markup=False,
            )
        if data.get("usage"):
            out.print(f"usage: {usage_text(data['usage'])}", highlight=False, markup=False)
        if state.status == st.FAILED:
            out.print(f"[red]reason:[/red] {summaries.failure_reason(state)}", highlight=False)


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="Playbook YAML file.")],
    set_: Annotated[list[str], typer.Option("--set", help="Workload value KEY=VALUE.")] = [],  # noqa: B006
    payload: Annotated[str | None, typer.Option(help="Workload as a JSON object.")] = None,
    db: DbOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Run a playbook to a terminal state (exit 0 COMPLETED; 1 FAILED, CANCELLED or the
    playbook refused; 2 bad input: an option, a file that cannot be read)."""
    fmt = chosen(output, json_out)
    workload = read_workload(payload, set_)
    text = read_playbook(file)
    try:
        # read from outside, like a registered document: within the settings' limits
        limits = yamllines.Limits.of()
        text = scripts.inline_text(text, file.parent, str(file), limits=limits)  # self-contained
        playbook = load.load_text(text, source=str(file), limits=limits)
    except PlaybookInvalid as exc:
        # refused before anything is written: no execution exists, the run simply failed
        if fmt is not Format.table:
            emit(
                {
                    "execution_id": None,
                    "status": "FAILED",
                    "error": {**exc.to_dict(), "reason": exc.message},
                    "steps": {},
                },
                fmt,
            )
        raise fail(exc.message, code=exit_codes.RUN_FAILED) from None
    for warning in playbook.warnings:  # as `validate` shows them; stderr keeps --json clean
        err.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    started_by = local_identity()
    drive_new(db, fmt, lambda e: e.start(playbook, text, workload, started_by=started_by))


def drive_new(db: str | None, fmt: Format, start: Any, *, existing: bool = False) -> None:
    """Drive the run `start(engine)` starts to its end and print how it ended (exit 0
    COMPLETED, 1 FAILED or CANCELLED): what `run`, `restart` and `rerun` do (`existing`:
    the last two, whose database must be there)."""
    _print_result(_driven(Drive(db, fmt, existing=existing), start), fmt)


@app.command()
def resume(
    execution_id: int,
    db: DbOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Continue an execution from its last event (after a crash or a kill).

    Exit 0 COMPLETED, 1 FAILED or CANCELLED (also for a run that had already ended: there
    is nothing to resume, and a script sees the run's outcome as `run` would report it),
    2 refused: another live process drives the run (its driver lease), or a server does.
    """
    fmt = chosen(output, json_out)
    with opened(db, existing=True) as store:
        row = store.get_execution(execution_id)
    if row is None:
        raise fail(f"no execution {execution_id}")
    if row.status in st.TERMINAL:
        _print_ended(db, execution_id, row.updated_at, fmt)

    async def start(engine: EmbeddedEngine) -> int:
        await engine.take_over(execution_id, on_wait=_waiting_for)
        return execution_id

    state = _driven(Drive(db, fmt, execution_id), start)
    _print_result(state, fmt)


def _print_ended(db: str | None, execution_id: int, ended: float, fmt: Format) -> None:
    state = load_state(db, execution_id)
    message = f"execution {execution_id} is {state.status} (ended {iso(ended)}); nothing to resume"
    if fmt is not Format.table:
        err.print(message, highlight=False, markup=False, soft_wrap=True)
        emit(summaries.execution_summary(state), fmt)
    else:
        out.print(message, highlight=False, markup=False)
        if state.status == st.FAILED:
            out.print(f"[red]reason:[/red] {summaries.failure_reason(state)}", highlight=False)
    raise typer.Exit(exit_codes.of_run(state.status))


def _waiting_for(lease: DriverLease) -> None:
    err.print(
        f"execution {lease.execution_id} is driven by {lease.holder} until"
        f" {iso(lease.expires_at)}; waiting for that lease to expire (taken over) or"
        " to be renewed (refused)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


@app.command()
def cancel(execution_id: int, db: DbOption = None, server: ServerOption = None) -> None:
    """Ask a running execution to stop: nothing new is issued, running steps are stopped.

    The process running it (`milepost run` or `resume`, or the server) notices within
    seconds, stops the running attempts (abandoned after `executor.spec.cancel_grace`),
    cancels its child runs, runs the compensations and the teardown steps and ends the run
    CANCELLED. A local run that no process drives any more is finished here, its
    compensations and teardown run by this command (Ctrl-C leaves it to `milepost resume`).
    """
    client = server_client(server, db)
    if client is not None:
        with client:
            remote(lambda: client.cancel(execution_id))
        out.print(f"cancel requested for execution {execution_id}")
        return

    actor = local_identity()
    with (
        opened(db, existing=True) as store,
        one_shot_engine(store, "cancel", Settings().machine_id) as engine,
    ):
        finished = (
            _finish(engine, execution_id, actor)
            if unattended.driver_gone(engine, execution_id)
            else _Finished.REQUEST
        )
        if finished is _Finished.ENDED:
            return
        if finished is _Finished.REQUEST:
            request_cancel(store, execution_id, engine.orchestrator, actor)
            out.print(f"cancel requested for execution {execution_id}")
            return
    # its attempts are settled but final steps remain, and no process would run them
    out.print(
        f"execution {execution_id} is cancelling; no process was driving it, so its"
        " compensations and teardown run here",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )

    async def start(engine: EmbeddedEngine) -> int:
        await engine.take_over(execution_id, on_wait=_waiting_for)
        return execution_id

    state = _driven(Drive(db, Format.table, execution_id, says=None), start)
    _show_result(state, Format.table)
    # the cancel did what was asked: 0, as `cancel` of a run that ended CANCELLED at once
    raise typer.Exit(
        exit_codes.OK if state.status == st.CANCELLED else exit_codes.of_run(state.status)
    )


class _Finished(enum.Enum):
    """What `_finish` left to `cancel`."""

    ENDED = "ended"
    """The run ended CANCELLED here (said)."""
    DRIVE = "drive"
    """Its cancel settled what ran, but work remains (its compensations, its teardown) and
    nothing drives it: `cancel` drives it to its end."""
    REQUEST = "request"
    """Another process took it over meanwhile, or this one cannot read it: the request only."""


def _finish(engine: Lifecycle, execution_id: int, actor: str) -> _Finished:
    """Finish the cancel of a run nothing drives, as far as no tool has to run."""
    try:
        ended = unattended.finish(engine, execution_id, actor)
    except AlreadyTerminal as exc:
        raise fail(exc.message) from None
    except MilepostError as exc:  # a sealed workload without its key: the request only
        err.print(
            f"could not finish the cancel here ({exc.message}); requesting it",
            highlight=False,
            markup=False,
        )
        return _Finished.REQUEST
    if execution_id in ended:
        out.print(f"execution {execution_id} CANCELLED (no process was driving it)")
        return _Finished.ENDED
    if unattended.driver_gone(engine, execution_id):  # finish gave its lease back
        return _Finished.DRIVE
    return _Finished.REQUEST  # another process took the run over meanwhile: it acts on it


def request_cancel(
    store: Store,
    execution_id: int,
    orchestrator: Orchestrator,
    actor: str | None = None,
    cause: str | None = None,
) -> None:
    """Append the request only to the log as it was read (`engine.behind`): a run that
    ended in between (another process writes it) takes nothing after its terminal event.
    Its running children get one too, naming their parent (their driver acts on each)."""

    def request(state: st.ExecutionState) -> list[ev.Event]:
        if state.terminal or state.cancel_requested:
            return []
        event = cancellation.request(
            orchestrator.new_id(), execution_id, orchestrator.clock(), actor, cause
        )
        # appended behind the driver's back: marked here as the engine would mark it, or the
        # store would refuse the claims of the final steps of a run whose status is settled
        return [cancellation.mark_cancel(state, event)]

    try:
        # only the status and the watermark are read: a run sealed with a key this
        # process lacks can still be cancelled
        read = behind.append(store, orchestrator, execution_id, request).read
    except ConcurrencyConflict:
        raise fail(f"execution {execution_id} kept moving; cancel again") from None
    if read.terminal:
        if cause is not None:
            return  # a child that ended meanwhile: nothing to cancel
        raise fail(f"execution {execution_id} is already {read.status}")
    for child in store.running_children(execution_id):
        request_cancel(store, child, orchestrator, actor, cancellation.child_cause(execution_id))
