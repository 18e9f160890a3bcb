"""What every command prints with: the two consoles, errors as one line and an exit code,
and the shapes more than one command shows (an execution's status, short values, times)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from milepost.core import state as st
from milepost.errors import MilepostError

out = Console(soft_wrap=True)
err = Console(stderr=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    # one line however long (a holder, a time): a script can match it
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def remote(call: Callable[[], Any]) -> Any:
    """A server's answer, or its refusal as `fail` prints it."""
    try:
        return call()
    except MilepostError as exc:
        raise fail(exc.message) from None


def short(value: Any, width: int = 90) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def print_status(data: dict[str, Any], json_out: bool) -> None:
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
        table.add_row(name, step["status"], str(step.get("runs", "")), short(step["result"], 70))
    out.print(table)
