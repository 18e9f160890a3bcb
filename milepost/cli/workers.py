"""`milepost workers`: the workers registry, from a server (`--server`) or the local
database (the in-process workers of the `milepost run` processes on it)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from milepost.cli.inputs import DbOption, JsonOption, ServerOption
from milepost.cli.output import (
    Format,
    OutputOption,
    chosen,
    emit,
    fail,
    out,
    remote,
    shown_time,
)
from milepost.cli.reads import runs
from milepost.engine import workers as registry

app = typer.Typer()


@app.command("workers")
def workers(
    db: DbOption = None,
    server: ServerOption = None,
    pool: Annotated[str | None, typer.Option(help="Only the workers of this pool.")] = None,
    status: Annotated[
        str | None,
        typer.Option(
            help="live, or lost (not seen for its ttl: its commands recover through their leases)."
        ),
    ] = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """List the workers: name, pool, host, pid, version, started, last seen, status and
    the commands each runs now."""
    from milepost.playbook import pools

    if status is not None and status not in registry.STATUSES:
        raise fail(f"--status {status!r}: use live or lost")
    if pool is not None and not pools.valid(pool):
        raise fail(f"--pool {pool!r}: a pool is a name of letters, digits and - _ . (1 to 100)")
    with runs(server, db) as where:
        items = remote(lambda: where.workers(pool=pool, status=status))
    if (fmt := chosen(output, json_out)) is not Format.table:
        emit(items, fmt)
        return
    if not items:
        out.print(
            f"no {status or ''} workers{f' of pool {pool}' if pool else ''}".replace("  ", " "),
            highlight=False,
        )
        return
    out.print(table(items, time.time()))


def table(items: list[dict[str, Any]], now: float) -> Table:
    shown = Table(
        "worker",
        "kind",
        "pools",
        "host",
        "pid",
        "version",
        "started",
        "last seen",
        "status",
        "running",
    )
    for item in items:
        running = item["running"]
        steps = ", ".join(sorted({r["step"] for r in running}))
        shown.add_row(
            item["name"],
            item["kind"],
            ", ".join(item["pools"]),
            item["host"],
            "" if item["pid"] is None else str(item["pid"]),
            item["version"],
            shown_time(item["started_at"]),
            _ago(item["last_seen"], now),
            item["status"],
            f"{len(running)} ({steps})" if running else "0",
        )
    return shown


def _ago(at: str | None, now: float) -> str:
    """`12s ago`, `4m ago`, `3h ago` (the API's ISO time)."""
    if at is None:
        return ""
    seconds = max(0, int(now - datetime.fromisoformat(at).timestamp()))
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"
