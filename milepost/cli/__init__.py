"""The `milepost` command line: one typer app made of the command groups of this package.

`milepost.cli:main` is the console script (pyproject.toml) and `milepost.cli:app` the app:
both stay here, whatever module a command lives in.
"""

from __future__ import annotations

import sys

import typer

from milepost.cli import (
    actions,
    approvals,
    catalog,
    credentials,
    doctor,
    executions,
    logs,
    runs,
    server,
    suites,
    usage,
    verify,
    workers,
)
from milepost.cli.output import err
from milepost.errors import MilepostError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="milepost: run NoETL playbooks durably.")  # fmt: skip
# added without a name, a group's commands (and its named sub-groups) are the app's own
_GROUPS = (runs, executions, actions, logs, approvals, catalog, credentials, suites, verify,
           server, doctor, workers, usage)  # fmt: skip
for group in _GROUPS:
    app.add_typer(group.app)


def main() -> None:
    try:
        app()
    except MilepostError as exc:
        err.print(f"[red]error:[/red] {exc.message}", highlight=False)
        sys.exit(2)

