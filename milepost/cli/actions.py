"""Acting on runs from the command line (issue 12): `retry`, `skip`, `restart`, `rerun`,
on a server (`--server`: the token's user acts) or on the local database (the identity
from `--user`, `$MILEPOST_USER` or the OS login, as `milepost approve` decides).

On the local database a retry or a skip is appended behind the log as it was read
(`engine.actions.append_behind`): the process that drives the run (`milepost run`, or
`milepost resume`) decides what follows on its next look. A restart or a re-run is a new
run: this command starts it and drives it to its end, as `milepost run` does (a refusal,
before anything is written, exits 2).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from milepost.cli.inputs import (
    DbOption,
    JsonOption,
    ServerOption,
    local_identity,
    one_shot_engine,
    opened,
    server_client,
)
from milepost.cli.output import Format, OutputOption, chosen, emit, out, remote
from milepost.cli.runs import drive_new
from milepost.engine import actions
from milepost.engine.actions import Build
from milepost.engine.drivers import holder_alive
from milepost.engine.embedded import EmbeddedEngine
from milepost.settings import Settings

app = typer.Typer()

UserOption = Annotated[
    str | None,
    typer.Option(
        "--user",
        help="Who acts, on the local database: user:<USER> \\[env: MILEPOST_USER; "
        "default the OS login]. On a server the token's user acts.",
    ),
]
ReasonOption = Annotated[str | None, typer.Option(help="Why (recorded with the action).")]


@app.command()
def retry(
    execution_id: int,
    step: str,
    reason: ReasonOption = None,
    db: DbOption = None,
    server: ServerOption = None,
    user: UserOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Run a step's next attempt now (a run that has ended: `restart`).

    The attempt that failed and waits for its retry, or one that is lost or stuck (it is
    stopped first); a new idempotency key, the same operation key."""
    client = server_client(server, db)
    if client is not None:
        with client:
            item = remote(lambda: client.retry(execution_id, step, reason))
    else:
        actor = local_identity(user)
        item = _locally(
            db,
            execution_id,
            step,
            "retry",
            lambda now, new_id: actions.retry_step(step, actor, now, new_id, reason),
        )
    _print_acted(item, chosen(output, json_out), client is None)


@app.command()
def skip(
    execution_id: int,
    step: str,
    result: Annotated[
        str,
        typer.Option(
            help="The step's result, as JSON (a loop step: the array of its iterations' results)."
        ),
    ],
    reason: ReasonOption = None,
    db: DbOption = None,
    server: ServerOption = None,
    user: UserOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Complete a step with the result given; the run goes on from it.

    Its running attempts are stopped; its `set` and arcs see the result as if the step
    had produced it."""
    try:
        value = json.loads(result)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="--result") from None
    client = server_client(server, db)
    if client is not None:
        with client:
            item = remote(lambda: client.skip(execution_id, step, value, reason))
    else:
        actor = local_identity(user)
        item = _locally(
            db,
            execution_id,
            step,
            "skip",
            lambda now, new_id: actions.skip_step(step, value, actor, now, new_id, reason),
        )
    _print_acted(item, chosen(output, json_out), client is None)


def _locally(
    db: str | None,
    execution_id: int,
    step: str,
    action: str,
    build: Callable[[float, Callable[[], int]], Build],
) -> dict[str, Any]:
    """Append the action behind the local run's log; the reply as the server's."""
    with (
        opened(db, existing=True) as store,
        one_shot_engine(store, action, Settings().machine_id) as engine,
    ):
        orchestrator = engine.orchestrator
        made: Build = build(time.time(), orchestrator.new_id)
        acted = remote(
            lambda: actions.append_behind(store, orchestrator, execution_id, step, action, made)
        )
        lease = store.get_driver(execution_id)
        driven = (
            lease is not None
            and lease.expires_at > time.time()
            and holder_alive(lease.holder) is not False
        )
    return {**acted.wire(), "driven": driven}


def _print_acted(item: dict[str, Any], fmt: Format, local: bool) -> None:
    if fmt is not Format.table:
        emit(item, fmt)
        return
    xid, step = item["execution_id"], item["step"]
    done = "retried" if item["action"] == "retry" else "skipped"
    out.print(
        f"execution {xid}: step {step} {done} by {item['actor']}", highlight=False, markup=False
    )
    if item["stopped"]:
        out.print(f"stopped the live attempts: {', '.join(item['stopped'])}", highlight=False)
    for issued in item["issued"]:
        out.print(
            f"attempt {issued['attempt']} issued (command {issued['command_id']})", highlight=False
        )
    if local and item.get("driven"):
        out.print(f"the process running execution {xid} acts on it now", highlight=False)
    elif local:
        out.print(
            f"nothing drives execution {xid} now: `milepost resume {xid}` goes on from it",
            highlight=False,
            markup=False,
        )


FromOption = Annotated[
    str | None,
    typer.Option(
        "--from",
        help="The step to start from \\[default: the failed step, else the first that "
        "did not complete].",
    ),
]


@app.command()
def restart(
    execution_id: int,
    from_step: FromOption = None,
    db: DbOption = None,
    server: ServerOption = None,
    user: UserOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Start a FAILED or CANCELLED run again from a step, as a new linked run.

    The steps it completed before that step are not run again: their results are reused.
    Locally the new run is driven to its end (exit 0 COMPLETED, 1 FAILED or CANCELLED);
    on a server it is started and its id printed."""
    _start_again(execution_id, db, server, user, chosen(output, json_out), from_step, restart=True)


@app.command()
def rerun(
    execution_id: int,
    db: DbOption = None,
    server: ServerOption = None,
    user: UserOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Start a new run with the same playbook version and inputs.

    Whatever the old run's status. Locally it is driven to its end, as `milepost run` does."""
    _start_again(execution_id, db, server, user, chosen(output, json_out), None, restart=False)


def _start_again(
    execution_id: int,
    db: str | None,
    server: str | None,
    user: str | None,
    fmt: Format,
    from_step: str | None,
    *,
    restart: bool,
) -> None:
    client = server_client(server, db)
    if client is not None:
        with client:
            item = remote(
                lambda: (
                    client.restart(execution_id, from_step)
                    if restart
                    else client.rerun(execution_id)
                )
            )
        if fmt is not Format.table:
            emit(item, fmt)
            return
        _print_started(item)
        return
    actor = local_identity(user)

    def start(engine: EmbeddedEngine) -> int:
        plan = (
            actions.plan_restart(engine.service, execution_id, from_step, actor)
            if restart
            else actions.plan_rerun(engine.service, execution_id, actor)
        )
        xid = engine.start_plan(plan)
        if fmt is Format.table:
            _print_started(plan.started(xid).wire())
        return xid

    drive_new(db, fmt, start, existing=True)


def _print_started(item: dict[str, Any]) -> None:
    if item.get("restarted_from"):
        reused = ", ".join(item["reused"]) or "none"
        out.print(
            f"execution {item['execution_id']} restarts {item['restarted_from']} from "
            f"step {item['from_step']} (reused: {reused})",
            highlight=False,
            markup=False,
        )
    else:
        out.print(f"execution {item['execution_id']} re-runs {item['rerun_of']}", highlight=False)
