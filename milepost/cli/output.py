"""What every command prints with: the two consoles, errors as one line and an exit code,
and the shapes more than one command shows (an execution's status, short values, times)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from milepost.core import state as st
from milepost.engine import summaries
from milepost.errors import MilepostError
from milepost.playbook import durations

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


def time_left(expires_at: float | str | None, now: float) -> str:
    """Until `expires_at` (epoch seconds or ISO-8601): `1d 2h`, `3h 05m`, `4m 10s`, `12s`;
    `expired` once it passed, `no expiry` without one."""
    if expires_at is None:
        return "no expiry"
    at = datetime.fromisoformat(expires_at).timestamp() if isinstance(expires_at, str) else expires_at
    left = int(at - now)
    return "expired" if left <= 0 else durations.span(left)


def print_status(data: dict[str, Any], json_out: bool) -> None:
    if json_out:
        typer.echo(json.dumps(data, default=str))
        return
    flag = " (compensating)" if data.get("compensating") else ""
    out.print(f"execution {data['execution_id']} {data.get('playbook') or ''}: "
              f"[bold]{data['status']}[/bold]{flag}", highlight=False)  # fmt: skip
    if data.get("restarted_from"):
        out.print(f"restarts execution {data['restarted_from']}", highlight=False)
    if data["status"] == st.FAILED and data.get("error"):
        out.print(f"[red]reason:[/red] {escape(summaries.error_reason(data['error']))}",
                  highlight=False)  # fmt: skip
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
    now = time.time()
    for name, step in data["steps"].items():
        if step.get("approval"):
            out.print(approval_line(name, step["approval"], now), highlight=False, markup=False,
                      soft_wrap=True)  # fmt: skip
    for entry in data.get("no_live_worker") or ():
        out.print(no_worker_line(entry), highlight=False, markup=False, soft_wrap=True)


def no_worker_line(entry: dict[str, Any]) -> str:
    """Commands queued in a pool no live worker serves (a server's status, DSL 10.6)."""
    steps = ", ".join(entry.get("steps") or ())
    return (f"waiting: {entry['commands']} command(s) of step {steps}: {entry['message']} "
            f"(start `milepost worker --pool {entry['pool']}`)")


def usage_text(usage: dict[str, Any]) -> str:
    """`976 tokens (812 in, 164 out), cost 0.0041 · openai/gpt-x 976 tokens 0.0041`: a
    `core.usage.summary`, and each (provider, model) when there are several or one is
    named."""
    text = (f"{usage['tokens']} tokens ({usage['input_tokens']} in, {usage['output_tokens']}"
            f" out), cost {usage['cost']:g}")  # fmt: skip
    entries = usage.get("by") or []
    if len(entries) > 1 or any(e["provider"] or e["model"] for e in entries):
        text += "".join(f" · {e['provider'] or '-'}/{e['model'] or '-'} {e['tokens']} tokens"
                        f" {e['cost']:g}" for e in entries)  # fmt: skip
    return text


def print_compensation(compensation: dict[str, Any]) -> None:
    """The compensations of a run (DSL 10.5), in the order they run."""
    table = Table("compensation", "undoes", "status", "result")
    for item in compensation["items"]:
        error = item.get("error") or {}
        shown = error.get("message") if item["status"] == "FAILED" else item.get("result")
        table.add_row(item["compensation"], f"{item['step']} (run {item['run']})",
                      item["status"], short(shown, 70))  # fmt: skip
    out.print(table)


def approval_line(step: str, approval: dict[str, Any], now: float) -> str:
    """One approval of a step (`summaries.approval_summary`): a pending one's risk, votes
    against the quorum, who may decide and the time left; a closed one's outcome."""
    head = f"approval {approval['approval_id']} (step {step}):"
    if approval["status"] != "pending":
        return f"{head} {approval.get('outcome') or approval['status']}"
    return (f"{head} pending · risk {approval['risk']} · votes {approval['approved']}/"
            f"{approval['quorum']} · who may decide: {', '.join(approval['approvers'])} · "
            f"time left: {time_left(approval.get('expires_at'), now)}")  # fmt: skip
