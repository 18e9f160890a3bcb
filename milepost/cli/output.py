"""What every command prints with: the two consoles, errors as one line and an exit code
(`exit_codes`), `--output table|json|yaml`, and the shapes more than one command shows (an
execution's status, short values, times, durations)."""

from __future__ import annotations

import enum
import json
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from milepost.cli import exit_codes
from milepost.client import ServerRefused, ServerUnavailable
from milepost.core import state as st
from milepost.core import waiting
from milepost.engine import summaries
from milepost.errors import MilepostError
from milepost.playbook import durations
from milepost.store.port import StoreUnavailable

PIPED_WIDTH = 100_000
"""The width of stdout off a terminal: rich would lay tables out for 80 columns and cut
the ids and names a script reads; a table takes only the width its cells need."""

out = Console(soft_wrap=True)
if not out.is_terminal:
    out.width = PIPED_WIDTH
err = Console(stderr=True)


def fail(message: str, code: int = exit_codes.REFUSED) -> typer.Exit:
    # one line however long (a holder, a time): a script can match it
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def exit_code(exc: MilepostError) -> int:
    """UNAVAILABLE for what may pass by itself (no server, a database down, a 5xx)."""
    if isinstance(exc, ServerUnavailable | StoreUnavailable):
        return exit_codes.UNAVAILABLE
    if isinstance(exc, ServerRefused) and exc.transient:
        return exit_codes.UNAVAILABLE
    return exit_codes.REFUSED


def remote(call: Callable[[], Any]) -> Any:
    """A server's (or the engine's) answer, or its refusal as `fail` prints it."""
    try:
        return call()
    except MilepostError as exc:
        raise fail(exc.message, exit_code(exc)) from None


def short(value: Any, width: int = 90) -> str:
    text = json_text(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def iso(ts: float | None) -> str:
    """ISO-8601 UTC with milliseconds, as the API writes times; empty for none."""
    return "" if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def shown_time(value: str | None) -> str:
    """A wire time (ISO-8601) as the tables show it: `2026-12-01 17:01:58.123`."""
    return (value or "").replace("T", " ").removesuffix("+00:00")


def duration(seconds: float | None) -> str:
    """`0.412s`, `12.3s`, `4m 05s`, `2h 03m`; empty for none (a run still going)."""
    if seconds is None:
        return ""
    if seconds < 10:
        return f"{seconds:.3f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    return f"{minutes // 60}h {minutes % 60:02d}m"


# -- --output ------------------------------------------------------------------------------


class Format(enum.StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOption = Annotated[
    Format | None,
    typer.Option("--output", "-o", help="table (the default), json or yaml.", show_default=False),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Same as --output json.")]


def chosen(output: Format | None, json_out: bool) -> Format:
    return output or (Format.json if json_out else Format.table)


def plain(value: Any) -> Any:
    """`value` as JSON can hold it: what is not JSON its `str`, a NaN or an infinity None
    (JSON has neither: `json.loads` elsewhere would refuse the document), as the API does."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def json_text(value: Any) -> str:
    return json.dumps(plain(value), allow_nan=False)


def emit(value: Any, fmt: Format) -> None:
    """Print `value` as one JSON document or as YAML on stdout (not for `table`)."""
    if fmt is Format.yaml:
        typer.echo(yaml.safe_dump(plain(value), sort_keys=False, allow_unicode=True), nl=False)
    else:
        typer.echo(json_text(value))


def emit_one(item: Any, fmt: Format) -> None:
    """One item of a stream (a followed run's events or logs): a JSON line, or a one-item
    YAML list (the whole stream reads as one YAML list). Not for `table`."""
    if fmt is Format.yaml:
        emit([item], fmt)
    else:
        typer.echo(json_text(item))


def time_left(expires_at: float | str | None, now: float) -> str:
    """Until `expires_at` (epoch seconds or ISO-8601): `1d 2h`, `3h 05m`, `4m 10s`, `12s`;
    `expired` once it passed, `no expiry` without one."""
    if expires_at is None:
        return "no expiry"
    at = (
        datetime.fromisoformat(expires_at).timestamp()
        if isinstance(expires_at, str)
        else expires_at
    )
    left = int(at - now)
    return "expired" if left <= 0 else durations.span(left)


def print_status(data: dict[str, Any], fmt: Format) -> None:
    if fmt is not Format.table:
        emit(data, fmt)
        return
    flag = (
        " (compensating)"
        if data.get("compensating")
        else " (tearing down)"
        if data.get("tearing_down")
        else ""
    )
    playbook = f" {data['playbook']}" if data.get("playbook") else ""
    out.print(
        f"execution {data['execution_id']}{playbook}: [bold]{data['status']}[/bold]{flag}",
        highlight=False,
    )
    if data.get("restarted_from"):
        out.print(f"restarts execution {data['restarted_from']}", highlight=False)
    if data["status"] == st.FAILED and data.get("error"):
        out.print(
            f"[red]reason:[/red] {escape(summaries.error_reason(data['error']))} (each "
            f"attempt, its stderr or response body: milepost describe "
            f"{data['execution_id']})",
            highlight=False,
        )
    if data.get("usage"):
        out.print(f"usage: {usage_text(data['usage'])}", highlight=False, markup=False)
    with_usage = any(step.get("usage") for step in data["steps"].values())
    table = Table("step", "status", "runs", "result", *(["usage"] if with_usage else []))
    for name, step in data["steps"].items():
        row = [name, step["status"], str(step.get("runs", "")), short(step["result"], 70)]
        if with_usage:
            used = step.get("usage")
            row.append(f"{used['tokens']} tokens, {used['cost']:g}" if used else "")
        table.add_row(*row)
    out.print(table)
    if data.get("compensation"):
        print_compensation(data["compensation"])
    if data.get("teardown"):
        print_teardown(data["teardown"])
    now = time.time()
    for name, step in data["steps"].items():
        if step.get("approval"):
            out.print(
                approval_line(name, step["approval"], now),
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    print_waits(data, now)
    for entry in data.get("no_live_worker") or ():
        out.print(no_worker_line(entry), highlight=False, markup=False, soft_wrap=True)
    if data.get("no_driver"):
        out.print(no_driver_line(data["no_driver"]), highlight=False, markup=False, soft_wrap=True)


def print_waits(data: dict[str, Any], now: float) -> None:
    """What the run waits on (`core.waiting`), one line each, its times from `now`; a pool
    without a live worker is left to `no_worker_line`, which says how to start one."""
    for entry in data.get("waits") or ():
        if entry["kind"] == waiting.NO_WORKER and data.get("no_live_worker"):
            continue
        out.print(
            f"waiting: {wait_text(entry, now)}", highlight=False, markup=False, soft_wrap=True
        )


def wait_text(entry: dict[str, Any], now: float) -> str:
    """`step 'flaky' retrying in 9m 12s, attempt 2 of 3, after: ValueError: boom`."""
    due = entry.get("due_at")
    if isinstance(due, str):  # as the API writes times
        entry = {**entry, "due_at": datetime.fromisoformat(due).timestamp()}
    wait = waiting.Wait.from_dict(entry)
    if wait.step is None:
        return waiting.text(wait, now)
    where = wait.step if wait.index is None else f"{wait.step}[{wait.index}]"
    return f"step '{where}' {waiting.text(wait, now)}"


def no_worker_line(entry: dict[str, Any]) -> str:
    """Commands queued in a pool no live worker serves (a server's status, DSL 10.6)."""
    steps = ", ".join(entry.get("steps") or ())
    return (
        f"waiting: {entry['commands']} command(s) of step {steps}: {entry['message']} "
        f"(start `milepost worker --pool {entry['pool']}`)"
    )


def no_driver_line(entry: dict[str, Any]) -> str:
    """A local run whose driver process is gone (`unattended.undriven`): what goes on."""
    queued = ""
    if entry["commands"]:
        queued = f"{entry['commands']} command(s) of step {', '.join(entry['steps'])} wait; "
    return (
        f"waiting: {queued}{entry['message']} (the `milepost run` that drove it,"
        f" {entry['holder']}, is gone): continue it with `{entry['resume']}`"
    )


def usage_text(usage: dict[str, Any]) -> str:
    """`976 tokens (812 in, 164 out), cost 0.0041 · openai/gpt-x 976 tokens 0.0041`: a
    `core.usage.summary`, and each (provider, model) when there are several or one is
    named."""
    text = (
        f"{usage['tokens']} tokens ({usage['input_tokens']} in, {usage['output_tokens']}"
        f" out), cost {usage['cost']:g}"
    )
    entries = usage.get("by") or []
    if len(entries) > 1 or any(e["provider"] or e["model"] for e in entries):
        text += "".join(
            f" · {e['provider'] or '-'}/{e['model'] or '-'} {e['tokens']} tokens {e['cost']:g}"
            for e in entries
        )
    return text


def print_compensation(compensation: dict[str, Any]) -> None:
    """The compensations of a run (DSL 10.5), in the order they run."""
    table = Table("compensation", "undoes", "status", "result")
    for item in compensation["items"]:
        error = item.get("error") or {}
        shown = error.get("message") if item["status"] == "FAILED" else item.get("result")
        table.add_row(
            item["compensation"],
            f"{item['step']} (run {item['run']})",
            item["status"],
            short(shown, 70),
        )
    out.print(table)


def print_teardown(teardown: dict[str, Any]) -> None:
    """The teardown steps of a run, in the order they run, and the status it ends with
    whatever they do."""
    table = Table("teardown", "status", "result")
    for item in teardown["items"]:
        error = item.get("error") or {}
        shown = error.get("message") if item["status"] == "FAILED" else item.get("result")
        table.add_row(item["step"], item["status"], short(shown, 70))
    out.print(table)
    failed = [i["step"] for i in teardown["items"] if i["status"] == "FAILED"]
    if failed:
        out.print(
            f"teardown failed: {', '.join(failed)} (the run's status stays {teardown['status']})",
            highlight=False,
            markup=False,
        )


def approval_line(step: str, approval: dict[str, Any], now: float) -> str:
    """One approval of a step (`summaries.approval_summary`): a pending one's risk, votes
    against the quorum, who may decide and the time left; a closed one's outcome."""
    head = f"approval {approval['approval_id']} (step {step}):"
    if approval["status"] != "pending":
        return f"{head} {approval.get('outcome') or approval['status']}"
    return (
        f"{head} pending · risk {approval['risk']} · votes {approval['approved']}/"
        f"{approval['quorum']} · who may decide: {', '.join(approval['approvers'])} · "
        f"time left: {time_left(approval.get('expires_at'), now)}"
    )
