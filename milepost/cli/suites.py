"""The suites run against the engine: `conformance` (a NoETL expectations folder) and
`bench` (the peer harness's workloads)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from milepost.cli import exit_codes
from milepost.cli.inputs import JsonOption, ServerOption
from milepost.cli.output import fail, out

app = typer.Typer()


@app.command()
def conformance(
    directory: Annotated[
        Path, typer.Argument(help="Folder with expectations.yaml and playbooks/.")
    ],
    pg: Annotated[str, typer.Option("--pg", help="PostgreSQL for `postgres` fixtures.")] = (
        "postgresql://postgres@127.0.0.1:5432/test"
    ),
    only: Annotated[
        list[str], typer.Option(help="Run only entries matching this (repeatable).")
    ] = [],  # noqa: B006
    server: ServerOption = None,
    cluster: Annotated[
        bool,
        typer.Option(
            "--cluster",
            help="Start a server on a fresh database of --pg and two workers, "
            "run through them, remove them.",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Run a NoETL conformance suite; one line per playbook, then `N passed, M failed, K skipped`.

    Embedded by default; `--server URL` (token from MILEPOST_TOKEN) runs it through a
    running server and its workers; `--cluster` starts such a server itself.
    """
    from milepost.conformance import runner

    if cluster:
        from milepost.conformance.cluster import LocalCluster

        with LocalCluster(pg) as local:
            out.print(
                f"cluster: server {local.url}, database {local.database}, {local.workers} workers",
                highlight=False,
            )
            raise typer.Exit(
                runner.main(
                    directory,
                    pg_url=pg,
                    json_out=json_out,
                    only=only or None,
                    server=local.url,
                    token=local.token,
                )
            )
    raise typer.Exit(
        runner.main(directory, pg_url=pg, json_out=json_out, only=only or None, server=server)
    )


@app.command()
def bench(
    workload: Annotated[str, typer.Argument(help="W1 (chain), W2 (fan-out + sum) or W3 (N runs).")],
    n: Annotated[int, typer.Argument(help="W1 chain length, W2 width, W3 number of runs.")],
    reps: Annotated[int, typer.Option(help="Timed repetitions.")] = 3,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up runs of size min(N, 5).")] = 1,
    variant: Annotated[
        str,
        typer.Option(
            help="default = embedded on SQLite; server = milepost server on PostgreSQL + 2 workers."
        ),
    ] = "default",
) -> None:
    """Run a peer-harness workload and print its JSON lines (shared/bench/README.md).

    `milepost bench INGEST N` instead measures the events/s that a server's
    `POST /api/events/batch` sustains (N batches of 100 events); `milepost bench
    NEIGHBOURS N` an N-iteration python loop alone, then beside another run's sleeping
    python steps (BENCHMARKS.md, session 22).
    """
    from milepost import bench as bench_mod

    if workload.upper() == "INGEST":
        typer.echo(json.dumps(bench_mod.ingest(batches=n)))
        return
    if workload.upper() == "NEIGHBOURS":
        try:
            summary = bench_mod.neighbours(n, reps=reps, variant=variant)
        except ValueError as exc:
            raise fail(str(exc)) from None
        typer.echo(json.dumps(summary))
        return
    try:
        ok = bench_mod.run(workload.upper(), n, reps=reps, warmup=warmup, variant=variant)
    except ValueError as exc:
        raise fail(str(exc)) from None
    raise typer.Exit(exit_codes.OK if ok else exit_codes.RUN_FAILED)
