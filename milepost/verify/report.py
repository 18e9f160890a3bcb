"""What `milepost verify` prints: the invariants (held or the violations), a table of
figures, and the seed to replay the run with."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from milepost.verify import checks
from milepost.verify.suite import VerifyResult

SHOWN = 10
"""Violations printed per invariant (the rest counted)."""


def render(
    console: Console, result: VerifyResult, found: list[checks.Verdict], replay: str
) -> None:
    """`replay`: the command line that draws the same schedule again."""
    table = Table(title="invariants", show_lines=False)
    table.add_column("invariant")
    table.add_column("result")
    for verdict in found:
        table.add_row(
            verdict.name,
            "[green]held[/green]"
            if verdict.ok
            else f"[red]{len(verdict.violations)} violation(s)[/red]",
        )
    console.print(table)
    for verdict in found:
        for line in verdict.violations[:SHOWN]:
            console.print(f"[red]✗[/red] {verdict.name}: {line}", highlight=False)
        if len(verdict.violations) > SHOWN:
            console.print(f"  ... {len(verdict.violations) - SHOWN} more", highlight=False)
    figures = Table(title="figures")
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    schedule = result.schedule
    rows: list[tuple[str, object]] = [("orders", len(schedule.orders))]
    rows += list(checks.figures(result.evidence).items())
    rows += [(f"faults: {kind}", n) for kind, n in sorted(result.injected.items())]
    rows += [
        ("zombie reports fenced", result.zombies_fenced),
        ("seconds", f"{result.seconds:.1f}"),
    ]
    for name, value in rows:
        figures.add_row(name, str(value))
    console.print(figures)
    ok = all(v.ok for v in found)
    word = "[green]passed[/green]" if ok else "[red]FAILED[/red]"
    console.print(f"verify {word}: seed {schedule.seed} (replay: {replay})", highlight=False)
