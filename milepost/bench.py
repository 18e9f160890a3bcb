"""`milepost bench`: the peer harness's workloads (shared/bench/README.md).

Prints the same JSON lines as the harness's `common.bench`: one per timed rep, then a
summary with `steps_per_s_median` and the peak RSS. Durability stays on: every event is
committed before anything acts on it. The default variant runs embedded (SQLite WAL,
`synchronous` as configured, NORMAL by default); `--variant server` runs the workloads
through `milepost server` on a fresh PostgreSQL database with two worker processes
(`LocalCluster`). Engines, servers and worker processes are started once and reused
across reps, as the peers reuse their connections and worker pools.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from milepost import __version__
from milepost.core import state as st
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load, model
from milepost.settings import Settings
from milepost.store.sqlite import SQLiteStore

WORKLOADS = ("W1", "W2", "W3")
W2_MAX_IN_FLIGHT = 256
NAPS = 8
"""The python steps of NEIGHBOURS' other run: all at once, each sleeping `NAP_S`."""
NAP_S = 3
SERVER_CONCURRENCY = 32
"""Commands each of the two workers of the server variant runs at once."""


def steps_for(workload: str, n: int) -> int:
    return n * 5 if workload == "W3" else n


def expected(workload: str, n: int) -> int:
    return {"W1": n, "W2": sum(range(n)), "W3": n * 5}[workload]


def _doc(name: str, workflow: list[dict[str, Any]]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "noetl.io/v2",
            "kind": "Playbook",
            "metadata": {"name": name, "path": f"bench/{name}"},
            "workflow": workflow,
        },
        sort_keys=False,
    )


def chain(name: str, n: int) -> str:
    """n sequential trivial python steps, each adding 1 to the previous result."""
    steps = []
    for i in range(n):
        prev: Any = 0 if i == 0 else f"{{{{ s{i - 1} }}}}"
        step: dict[str, Any] = {
            "step": f"s{i}",
            "tool": {"kind": "python", "input": {"prev": prev}, "code": "result = prev + 1"},
        }
        if i + 1 < n:
            step["next"] = f"s{i + 1}"
        steps.append(step)
    return _doc(name, steps)


def fanout(n: int) -> str:
    """One parallel loop of n trivial python steps, joined by a sum."""
    return _doc(
        "w2",
        [
            {
                "step": "fan",
                "loop": {
                    "in": "{{ range(workload.n) | list }}",
                    "iterator": "i",
                    "spec": {"mode": "parallel", "max_in_flight": W2_MAX_IN_FLIGHT},
                },
                "tool": {"kind": "python", "input": {"i": "{{ i }}"}, "code": "result = i"},
                "next": "total",
            },
            {
                "step": "total",
                "tool": {
                    "kind": "python",
                    "input": {"values": "{{ fan }}"},
                    "code": "result = sum(values)",
                },
            },
        ],
    )


def loop() -> str:
    """NEIGHBOURS' loop: a `workload.n`-iteration parallel loop of trivial python steps, as
    a user writes it (the default `max_in_flight`)."""
    return _doc(
        "neighbours-loop",
        [
            {
                "step": "fan",
                "loop": {
                    "in": "{{ range(workload.n) | list }}",
                    "iterator": "i",
                    "spec": {"mode": "parallel"},
                },
                "tool": {"kind": "python", "input": {"i": "{{ i }}"}, "code": "result = i"},
            }
        ],
    )


def naps() -> str:
    """NEIGHBOURS' other run: `NAPS` python steps at once, each sleeping `NAP_S` seconds."""
    return _doc(
        "neighbours-naps",
        [
            {
                "step": "nap",
                "loop": {
                    "in": f"{{{{ range({NAPS}) | list }}}}",
                    "iterator": "i",
                    "spec": {"mode": "parallel"},
                },
                "tool": {
                    "kind": "python",
                    "input": {"i": "{{ i }}"},
                    "code": f"import time\ntime.sleep({NAP_S})\nresult = i",
                },
            }
        ],
    )


def playbook_key(workload: str, n: int) -> tuple[str, int]:
    """What tells two playbooks of the workloads apart: only W1's depends on `n`."""
    return workload, n if workload == "W1" else 0


def playbook_text(workload: str, n: int) -> str:
    """W1: a chain of n steps; W2: an n-wide loop and a sum; W3: a chain of 5 (run n times)."""
    if workload == "W1":
        return chain("w1", n)
    if workload == "W2":
        return fanout(n)
    return chain("w3", 5)


class Bench:
    def __init__(self, engine: EmbeddedEngine) -> None:
        self.engine = engine
        self._cache: dict[tuple[str, int], tuple[model.Playbook, str]] = {}

    def _playbook(self, workload: str, n: int) -> tuple[model.Playbook, str]:
        key = playbook_key(workload, n)
        if key not in self._cache:
            text = playbook_text(workload, n)
            self._cache[key] = (load.load_text(text, source=f"bench:{workload}"), text)
        return self._cache[key]

    async def run_once(self, workload: str, n: int) -> Any:
        pb, text = self._playbook(workload, n)
        if workload == "W3":
            xids = [self.engine.start(pb, text, {}) for _ in range(n)]
            states = [await self.engine.wait(x) for x in xids]
            return sum(_value(s, "s4") for s in states)
        state = await self.engine.wait(self.engine.start(pb, text, {"n": n}))
        return _value(state, f"s{n - 1}" if workload == "W1" else "total")


def _value(state: st.ExecutionState, step: str) -> Any:
    if state.status != st.COMPLETED:
        raise RuntimeError(f"execution {state.execution_id} {state.status}: {state.error}")
    return state.results[step]


@dataclass
class _Reps:
    """Prints the harness's JSON lines: one per timed rep, then the summary."""

    workload: str
    n: int
    variant: str
    note: str
    emit: Callable[[dict[str, Any]], None]
    walls: list[float] = field(default_factory=list)

    def _base(self) -> dict[str, Any]:
        return {
            "engine": "milepost",
            "version": __version__,
            "variant": self.variant,
            "workload": self.workload,
            "n": self.n,
        }

    def record(self, rep: int, wall: float, value: Any, error: BaseException | None) -> None:
        err = None if error is None else f"{type(error).__name__}: {error}"[:300]
        ok = err is None and value == expected(self.workload, self.n)
        if ok:
            self.walls.append(wall)
        steps = steps_for(self.workload, self.n)
        self.emit(
            {
                **self._base(),
                "rep": rep,
                "ok": ok,
                "wall_s": round(wall, 4),
                "steps": steps,
                "steps_per_s": round(steps / wall, 1),
                "value": value,
                "error": err,
                "note": self.note,
            }
        )

    def close(self, reps: int, **extra: Any) -> bool:
        summary: dict[str, Any] = {
            **self._base(),
            "summary": True,
            "ok_reps": len(self.walls),
            "reps": reps,
            **extra,
            "note": self.note,
        }
        if self.walls:
            med = statistics.median(self.walls)
            summary.update(
                median_s=round(med, 4),
                min_s=round(min(self.walls), 4),
                max_s=round(max(self.walls), 4),
                steps_per_s_median=round(steps_for(self.workload, self.n) / med, 1),
            )
        self.emit(summary)
        return bool(self.walls)


async def _reps(
    run_once: Callable[[str, int], Awaitable[Any]],
    workload: str,
    n: int,
    reps: int,
    warmup: int,
    out: _Reps,
) -> None:
    """The harness's protocol: `warmup` untimed runs of size min(n, 5), then `reps` timed."""
    for _ in range(warmup):
        await run_once(workload, min(n, 5))
    for rep in range(1, reps + 1):
        t0 = time.perf_counter()
        value, error = None, None
        try:
            value = await run_once(workload, n)
        except Exception as exc:  # report and keep going, like the harness
            error = exc
        out.record(rep, time.perf_counter() - t0, value, error)


def _rss_mb(who: int) -> float:
    return round(resource.getrusage(who).ru_maxrss / 1024, 1)


@contextlib.asynccontextmanager
async def embedded(db: Path) -> AsyncIterator[EmbeddedEngine]:
    """The embedded engine the benchmark measures: a SQLite file at `db` (WAL, the
    settings' `synchronous`), the settings' concurrency and python workers."""
    settings = Settings()
    store = SQLiteStore(db, synchronous=settings.sqlite_synchronous)
    try:
        async with EmbeddedEngine(
            store,
            concurrency=settings.concurrency,
            python_workers=settings.python_workers,
            python_idle_seconds=settings.python_idle_seconds,
        ) as engine:
            yield engine
    finally:
        store.close()


async def _bench(
    workload: str,
    n: int,
    reps: int,
    warmup: int,
    variant: str,
    emit: Callable[[dict[str, Any]], None],
    db_dir: Path,
) -> bool:
    out = _Reps(
        workload,
        n,
        variant,
        f"embedded, SQLite WAL synchronous={Settings().sqlite_synchronous}",
        emit,
    )
    async with embedded(db_dir / "bench.db") as engine:
        bench = Bench(engine)
        bench._playbook(workload, n)  # parsing the playbook is not part of a run
        await _reps(bench.run_once, workload, n, reps, warmup, out)
    return out.close(
        reps,
        driver_peak_rss_mb=_rss_mb(resource.RUSAGE_SELF),
        python_worker_peak_rss_mb=_rss_mb(resource.RUSAGE_CHILDREN),
    )


class ServerBench:
    """The same workloads through `milepost server` on PostgreSQL with two worker processes.

    The driver is a client like any other: it submits W3's runs concurrently (as a user
    starting many runs would) and waits for each with the status long-poll."""

    SUBMITTERS = 8
    """Requests the driver keeps in flight at once."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._registered: set[tuple[str, int]] = set()

    async def _path(self, workload: str, n: int) -> str:
        """The catalog path of the workload's playbook, registered once per size. The text
        is made once too: writing W1's 200 steps as YAML took 30 ms of every timed run."""
        key = playbook_key(workload, n)
        if key not in self._registered:
            await self.client.register(playbook_text(workload, n))
            self._registered.add(key)
        return f"bench/{workload.lower()}"

    async def run_once(self, workload: str, n: int) -> Any:
        path = await self._path(workload, n)
        if workload != "W3":
            xid = await self.client.execute(path, {"n": n})
            return await self._value(xid, f"s{n - 1}" if workload == "W1" else "total")
        gate = asyncio.Semaphore(self.SUBMITTERS)  # one for the submissions, then the waits

        async def submit() -> Any:
            async with gate:
                return await self.client.execute(path, {})

        async def value(xid: Any) -> Any:
            async with gate:
                return await self._value(xid, "s4")

        xids = await asyncio.gather(*(submit() for _ in range(n)))
        return sum(await asyncio.gather(*(value(x) for x in xids)))

    async def _value(self, xid: Any, step: str) -> Any:
        status = await self.client.wait(xid, timeout=600)
        if status["status"] != st.COMPLETED:
            raise RuntimeError(f"execution {xid} {status['status']}: {status.get('error')}")
        return status["steps"][step]["result"]


def _bench_server(
    workload: str,
    n: int,
    reps: int,
    warmup: int,
    variant: str,
    emit: Callable[[dict[str, Any]], None],
) -> bool:
    from milepost.client import AsyncMilepostClient
    from milepost.conformance.cluster import LocalCluster

    pg = os.environ.get("MILEPOST_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    concurrency = int(os.environ.get("MILEPOST_BENCH_WORKER_CONCURRENCY") or SERVER_CONCURRENCY)
    out = _Reps(
        workload,
        n,
        variant,
        "server on PostgreSQL (synchronous_commit on), "
        f"2 worker processes x {concurrency}, reports over the worker channel, "
        "NATS wake-ups + polling",
        emit,
    )

    async def main(url: str, token: str) -> None:
        async with AsyncMilepostClient(url, token, timeout=120) as client:
            await _reps(ServerBench(client).run_once, workload, n, reps, warmup, out)

    with LocalCluster(pg, workers=2, concurrency=concurrency) as cluster:
        asyncio.run(main(cluster.url, cluster.token))
    return out.close(reps, driver_peak_rss_mb=_rss_mb(resource.RUSAGE_SELF))


def ingest(batches: int = 200, size: int = 100) -> dict[str, Any]:
    """Events/s that `POST /api/events/batch` sustains (informative events of one run)."""
    from milepost.client import MilepostClient
    from milepost.conformance.cluster import LocalCluster

    pg = os.environ.get("MILEPOST_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    with (
        LocalCluster(pg, workers=0) as cluster,
        MilepostClient(cluster.url, cluster.token, timeout=120) as client,
    ):
        client.register(chain("ingest", 1))
        xid = client.execute("bench/ingest", {})
        batch = [
            {
                "execution_id": str(xid),
                "event_type": "command.heartbeat",
                "step": "s0",
                "meta": {"i": i},
            }
            for i in range(size)
        ]
        client.post_events(batch)  # warm-up
        t0 = time.perf_counter()
        for _ in range(batches):
            client.post_events(batch)
        wall = time.perf_counter() - t0
    return {
        "engine": "milepost",
        "variant": "server",
        "measure": "events_batch_ingest",
        "batches": batches,
        "batch_size": size,
        "wall_s": round(wall, 4),
        "events_per_s": round(batches * size / wall, 1),
    }


def run(
    workload: str,
    n: int,
    *,
    reps: int = 3,
    warmup: int = 1,
    variant: str = "default",
    db_dir: Path | None = None,
) -> bool:
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r} (choose from {', '.join(WORKLOADS)})")

    def emit(line: dict[str, Any]) -> None:
        print(json.dumps(line), flush=True)

    if variant == "server":
        return _bench_server(workload, n, reps, warmup, variant, emit)
    if variant != "default":
        raise ValueError(f"unknown variant {variant!r} (default = embedded, server)")
    with tempfile.TemporaryDirectory(prefix="milepost-bench-") as tmp:
        return asyncio.run(_bench(workload, n, reps, warmup, variant, emit, db_dir or Path(tmp)))


# -- NEIGHBOURS: one run's python steps beside another's (issue 33, item 11) -----------------

Start = Callable[[str, int], Awaitable[Any]]
"""Starts the playbook of that text with the workload `{n: ...}`; the run's handle."""
Wait = Callable[[Any], Awaitable[None]]
"""Waits for a run to end COMPLETED (raises otherwise)."""


async def _neighbours_reps(
    start: Start,
    wait: Wait,
    n: int,
    reps: int,
    emit: Callable[[dict[str, Any]], None],
    base: dict[str, Any],
) -> dict[str, list[float]]:
    """Each rep: the loop alone, then the loop and the naps started together (the wall
    until both end, and until the loop ends)."""
    looped, napping = loop(), naps()
    await wait(await start(looped, min(n, 5)))  # warm-up, untimed
    walls: dict[str, list[float]] = {"alone_s": [], "pair_s": [], "pair_loop_s": []}
    for rep in range(1, reps + 1):
        t0 = time.perf_counter()
        await wait(await start(looped, n))
        alone = time.perf_counter() - t0
        t0 = time.perf_counter()
        nap, fan = await start(napping, 0), await start(looped, n)
        await wait(fan)
        pair_loop = time.perf_counter() - t0
        await wait(nap)
        pair = time.perf_counter() - t0
        for key, value in (("alone_s", alone), ("pair_s", pair), ("pair_loop_s", pair_loop)):
            walls[key].append(value)
        emit(
            {
                **base,
                "rep": rep,
                "alone_s": round(alone, 3),
                "pair_s": round(pair, 3),
                "pair_loop_s": round(pair_loop, 3),
                "pair_over_alone": round(pair / alone, 2),
                "pair_loop_over_alone": round(pair_loop / alone, 2),
            }
        )
    return walls


def neighbours(n: int, *, reps: int = 3, variant: str = "default") -> dict[str, Any]:
    """Issue 33 item 11: an n-iteration parallel python loop alone, then beside another run
    whose `NAPS` python steps sleep `NAP_S` s, in one process (embedded: one engine, the
    settings' concurrency and python processes; server: one `milepost worker` at the
    settings' concurrency). Prints a line a rep; returns the summary (medians, spread)."""
    settings = Settings()
    base: dict[str, Any] = {
        "engine": "milepost",
        "version": __version__,
        "variant": variant,
        "workload": "NEIGHBOURS",
        "n": n,
        "naps": f"{NAPS} x {NAP_S}s",
        "concurrency": settings.concurrency,
        "python_workers": settings.python_workers,
    }

    def emit(line: dict[str, Any]) -> None:
        print(json.dumps(line), flush=True)

    if variant == "server":
        walls = _neighbours_server(n, reps, emit, base, settings)
    elif variant == "default":
        with tempfile.TemporaryDirectory(prefix="milepost-bench-") as tmp:
            walls = asyncio.run(_neighbours_embedded(n, reps, emit, base, Path(tmp)))
    else:
        raise ValueError(f"unknown variant {variant!r} (default = embedded, server)")
    summary: dict[str, Any] = {**base, "summary": True, "reps": reps}
    for key, values in walls.items():
        summary[key] = {
            "median": round(statistics.median(values), 3),
            "min": round(min(values), 3),
            "max": round(max(values), 3),
        }
    ratios = [p / a for p, a in zip(walls["pair_s"], walls["alone_s"], strict=True)]
    summary["pair_over_alone_median"] = round(statistics.median(ratios), 2)
    return summary


async def _neighbours_embedded(
    n: int, reps: int, emit: Callable[[dict[str, Any]], None], base: dict[str, Any], db_dir: Path
) -> dict[str, list[float]]:
    parsed: dict[str, model.Playbook] = {}  # parsing is not part of a run
    async with embedded(db_dir / "bench.db") as engine:

        async def start(text: str, n: int) -> int:
            if text not in parsed:
                parsed[text] = load.load_text(text, source="bench:neighbours")
            return engine.start(parsed[text], text, {"n": n})

        async def wait(xid: int) -> None:
            state = await engine.wait(xid)
            if state.status != st.COMPLETED:
                raise RuntimeError(f"execution {xid} {state.status}: {state.error}")

        return await _neighbours_reps(start, wait, n, reps, emit, base)


def _neighbours_server(
    n: int,
    reps: int,
    emit: Callable[[dict[str, Any]], None],
    base: dict[str, Any],
    settings: Settings,
) -> dict[str, list[float]]:
    from milepost.client import AsyncMilepostClient
    from milepost.conformance.cluster import LocalCluster

    pg = os.environ.get("MILEPOST_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    found: dict[str, list[float]] = {}

    async def main(url: str, token: str) -> None:
        async with AsyncMilepostClient(url, token, timeout=120) as client:
            registered: set[str] = set()

            async def start(text: str, n: int) -> Any:
                path = yaml.safe_load(text)["metadata"]["path"]
                if path not in registered:
                    await client.register(text)
                    registered.add(path)
                return await client.execute(path, {"n": n})

            async def wait(xid: Any) -> None:
                status = await client.wait(xid, timeout=1800)
                if status["status"] != st.COMPLETED:
                    raise RuntimeError(f"execution {xid} {status['status']}: {status.get('error')}")

            found.update(await _neighbours_reps(start, wait, n, reps, emit, base))

    with LocalCluster(pg, workers=1, concurrency=settings.concurrency) as cluster:
        asyncio.run(main(cluster.url, cluster.token))
    return found
