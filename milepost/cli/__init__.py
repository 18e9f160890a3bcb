"""The `milepost` command line: one typer app made of the command groups of this package.

`milepost.cli:main` is the console script (pyproject.toml) and `milepost.cli:app` the app:
both stay here, whatever module a command lives in.
"""

from __future__ import annotations

from typing import Annotated

import typer

from milepost.cli import (
    actions,
    approvals,
    catalog,
    credentials,
    doctor,
    event_log,
    executions,
    logs,
    runs,
    server,
    suites,
    usage,
    verify,
    web_ui,
    workers,
)
from milepost.cli.help import quiet_flags
from milepost.cli.output import exit_code, fail
from milepost.errors import MilepostError

quiet_flags()

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="milepost: run NoETL playbooks durably. Exit codes: 0 done (a run "
    "COMPLETED), 1 a run FAILED or was CANCELLED, 2 bad input or refused, "
    "3 server or database unavailable, 130 interrupted.",
)
# added without a name, a group's commands (and its named sub-groups) are the app's own
_GROUPS = (
    runs,
    executions,
    event_log,
    actions,
    logs,
    approvals,
    catalog,
    credentials,
    suites,
    verify,
    server,
    doctor,
    workers,
    usage,
    web_ui,
)
for group in _GROUPS:
    app.add_typer(group.app)


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        typer.echo(f"milepost {version('milepost')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """milepost: run NoETL playbooks durably."""


def main() -> None:
    try:
        app()
    except MilepostError as exc:  # one line, never a traceback
        raise SystemExit(fail(exc.message, exit_code(exc)).exit_code) from None
