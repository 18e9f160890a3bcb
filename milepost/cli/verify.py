"""`milepost verify`: the fault suite (`milepost/verify/`) against this installation."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from milepost.cli.output import err, fail, out
from milepost.settings import Settings

app = typer.Typer()


@app.command()
def verify(
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="The database the suite's server uses: a SQLite path or sqlite:///path, "
            "or postgresql://... (a dedicated one: the suite's runs and its verify_effect table "
            "stay in it). Default: a new SQLite file in a temporary folder.",
        ),
    ] = None,
    runs: Annotated[int, typer.Option(min=1, help="Runs of the mixed playbook.")] = 20,
    seed: Annotated[
        int,
        typer.Option(
            help="Draws the workloads and the faults: the same seed replays the same schedule."
        ),
    ] = 1,
    duration: Annotated[
        float, typer.Option(min=1, help="Seconds of faults (the runs start in the first half).")
    ] = 30.0,
    deadline: Annotated[
        float, typer.Option(min=1, help="Seconds after the faults within which every run must end.")
    ] = 120.0,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 2,
    lease: Annotated[
        float,
        typer.Option(min=1, help="Lease seconds of the installation (pauses up to twice this)."),
    ] = 3.0,
    keep: Annotated[
        Path | None, typer.Option(help="Keep the processes' logs and journals in this folder.")
    ] = None,
) -> None:
    """Run playbooks with loops, branches, retries, a child, an approval and a compensation
    on a server and workers started here, while killing (SIGKILL) and pausing
    (SIGSTOP/SIGCONT) them at moments drawn from --seed; then check the invariants.

    Exit 0 when every invariant held, 1 on any violation (the seed replays it).
    """
    from milepost.verify import checks, report, schedule, suite

    with _workdir(keep) as workdir:
        db_url = db or f"sqlite:///{workdir / 'verify.db'}"
        plan = schedule.draw(seed, runs=runs, duration=duration, workers=workers, lease=lease)
        out.print(
            f"verify: seed {seed}, {runs} runs, {len(plan.faults)} faults over "
            f"{duration:g}s, {workers} workers, lease {lease:g}s, database "
            f"{_masked(db_url)}",
            highlight=False,
        )
        if Settings().fault_skip_fence:
            out.print(
                "[yellow]MILEPOST_FAULT_SKIP_FENCE is set: the installation takes stale "
                "reports; the suite must fail[/yellow]"
            )
        options = suite.Options(
            db_url=db_url,
            workdir=workdir,
            duration=duration,
            deadline=deadline,
            workers=workers,
            lease=lease,
        )
        columns = (
            TextColumn("runs ended"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
        )
        with Progress(*columns, console=err, transient=True) as bar:
            task = bar.add_task("starting", total=runs)

            def progress(ended: int, total: int, last: str) -> None:
                bar.update(task, completed=ended, total=total, description=last)

            result = suite.run(options, plan, progress)
        found = checks.check(result.evidence)
        replay = (
            f"milepost verify --seed {seed} --runs {runs} --duration {duration:g} "
            f"--workers {workers} --lease {lease:g}"
        )
        report.render(out, result, found, replay)
        if keep is None and not all(v.ok for v in found):
            out.print("(run again with --keep DIR to keep the processes' logs)")
    raise typer.Exit(0 if all(v.ok for v in found) else 1)


@contextlib.contextmanager
def _workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        try:
            keep.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise fail(f"--keep {keep}: {exc.strerror}") from None
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="milepost-verify-") as tmp:
        yield Path(tmp)


def _masked(url: str) -> str:
    from milepost.store.postgres import mask_url

    return mask_url(url)
