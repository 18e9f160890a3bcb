"""The embedded engine's own work per step (BENCHMARKS.md, session 12), not a test:
`python -m tests.engine_cpu W1 200 REPS [--profile FILE]`.

Runs the workload twice untimed (the playbook registered, its templates compiled), then
REPS times, and prints the engine process's CPU time and wall clock per step. On a machine
whose neighbours move both by ±20%, count instructions instead, which they cannot move:
run it under valgrind with two values of REPS and divide the difference by the steps
between them (the python tool's worker processes are not traced, only the engine):

    valgrind --tool=callgrind --callgrind-out-file=r1.cg python -m tests.engine_cpu W1 200 1
    valgrind --tool=callgrind --callgrind-out-file=r4.cg python -m tests.engine_cpu W1 200 4
    # (Ir of r4 - Ir of r1) / (3 * 200): instructions per step
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import tempfile
import time
from pathlib import Path

from milepost import bench


async def measure(workload: str, n: int, reps: int, profile: str | None) -> None:
    # the database goes when the measurement ends (each run used to leave its own in /tmp)
    with tempfile.TemporaryDirectory(prefix="milepost-cpu-") as tmp:
        await _measure(Path(tmp) / "cpu.db", workload, n, reps, profile)


async def _measure(db: Path, workload: str, n: int, reps: int, profile: str | None) -> None:
    async with bench.embedded(db) as engine:
        runs = bench.Bench(engine)
        for _ in range(2):
            await runs.run_once(workload, n)
        profiler = cProfile.Profile() if profile else None
        cpu, wall = time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        for _ in range(reps):
            await runs.run_once(workload, n)
        if profiler:
            profiler.disable()
            profiler.dump_stats(profile)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    steps = bench.steps_for(workload, n) * reps
    print(
        f"{workload} {n} x{reps}: engine CPU {cpu / steps * 1e6:.0f} us a step,"
        f" wall {wall / steps * 1e6:.0f} us a step, {steps / wall:.0f} steps/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=["W1", "W2", "W3"])
    parser.add_argument("n", type=int)
    parser.add_argument("reps", type=int)
    parser.add_argument("--profile", help="write cProfile's statistics of the timed reps here")
    args = parser.parse_args()
    asyncio.run(measure(args.workload, args.n, args.reps, args.profile))


if __name__ == "__main__":  # the python tool's workers start by spawn: they import this
    main()
