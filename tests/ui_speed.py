"""The web UI's speed benchmark (issue 14; BENCHMARKS.md "web UI"), not a test:
`make bench-ui`, or `python -m tests.ui_speed [--iterations N] [--runs N]`.

In headless Chromium (Debian's `chromium`, driven by Playwright), against `milepost ui`:
- the run page of a loop run of `--iterations` iterations (three events each), of a
  500-step playbook (a chain), of ones of about as many steps with detours (`branchy`),
  with forks whose branches join again (`forks`), with arcs to the next step and the one
  after (`lattice`), with arcs to the next and to one further on at random (`tangle`) and
  of a grid, each step leading right and down (`mesh`, which no chain, fork or arc beside
  a longer way reduces: a box per step for elkjs): the time from navigation until the
  graph shows the run's final counts and the timeline its first rows (interactive), and
  until the timeline holds every event;
- a live run page while nothing changes: the CPU of every Chromium process over 10 s, as a
  share of one core (the page follows the run's stream the whole time);
- the runs list with `--runs` executions on PostgreSQL: the API's answer to a page (median
  of 20, first page and a filtered one) and the list page in the browser.

Prints one JSON line per figure and a summary. The data is made by the embedded engine
(noop steps) and kept in a temporary folder / database dropped at the end."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store import factory
from tests.acceptance.harness import (
    MILEPOST,
    PG_ADMIN_URL,
    Proc,
    _pg_connect,
    milepost_ui,
)
from tests.shared import clean_env, wait_for

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TICKS = os.sysconf("SC_CLK_TCK")


def _playbook(name: str, workflow: list[dict[str, Any]]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "noetl.io/v2",
            "kind": "Playbook",
            "metadata": {"name": name, "path": f"bench/{name}"},
            "workflow": workflow,
        },
        sort_keys=False,
    )


def big_loop() -> str:
    return _playbook(
        "big_loop",
        [
            {
                "step": "start",
                "loop": {
                    "in": "{{ range(workload.n) | list }}",
                    "iterator": "i",
                    "spec": {"mode": "parallel", "max_in_flight": 256},
                },
                "tool": {"kind": "noop"},
                "next": "end",
            },
            {"step": "end", "tool": {"kind": "noop"}},
        ],
    )


def chain(n: int) -> str:
    steps: list[dict[str, Any]] = []
    for i in range(n):
        step: dict[str, Any] = {"step": "start" if i == 0 else f"s{i}", "tool": {"kind": "noop"}}
        if i + 1 < n:
            step["next"] = f"s{i + 1}"
        steps.append(step)
    return _playbook("chain500", steps)


def _sided_path(name: str, n: int, sides: tuple[str, ...], direct: bool) -> str:
    """`n` steps: n / (1 + len(sides)) on the run's path, each leading to `sides` steps that
    join the path again at the next one; the run takes the first side, or with `direct`
    none of them and the arc to the next path step."""
    steps: list[dict[str, Any]] = []
    length = n // (1 + len(sides))
    for i in range(length):
        step: dict[str, Any] = {"step": "start" if i == 0 else f"p{i}", "tool": {"kind": "noop"}}
        steps.append(step)
        if i + 1 < length:
            after = f"p{i + 1}"
            arcs: list[dict[str, Any]] = [
                {"step": f"{side}{i}", **({"when": "{{ false }}"} if direct or j else {})}
                for j, side in enumerate(sides)
            ]
            step["next"] = {"arcs": arcs + ([{"step": after}] if direct else [])}
            steps += [
                {"step": f"{side}{i}", "tool": {"kind": "noop"}, "next": after} for side in sides
            ]
    return _playbook(name, steps)


def branchy(n: int) -> str:
    """`n` steps with no run of steps one after the other: n/2 on the run's path, each with
    a side step its arc never takes. (The layout leaves out the arcs that skip a detour,
    `withoutShortcuts` in ui/src/run/chains.ts: this shape is then one chain; `forks` is
    the case with a box per step.)"""
    return _sided_path("branchy500", n, ("x",), direct=True)


def forks(n: int) -> str:
    """`n` steps: n/3 on the run's path, each forking to two steps that both lead to the
    next. (Each fork's branches are one column, `siblings` in ui/src/run/chains.ts: this
    shape is one chain of columns.)"""
    return _sided_path("forks500", n, ("a", "b"), direct=False)


def _skipping(name: str, n: int, further: Callable[[int], int]) -> str:
    """`n` steps, each with an arc to the next and one (never taken) `further(i)` steps on."""
    steps: list[dict[str, Any]] = []
    for i in range(n):
        arcs = [
            {"step": f"s{j}", **({"when": "{{ false }}"} if j > i + 1 else {})}
            for j in (i + 1, i + further(i))
            if j < n
        ]
        steps.append(
            {
                "step": "start" if i == 0 else f"s{i}",
                "tool": {"kind": "noop"},
                **({"next": {"arcs": arcs}} if arcs else {}),
            }
        )
    return _playbook(name, steps)


def lattice(n: int) -> str:
    """`n` steps, each with an arc to the next and one to the step after it (never taken).
    (The layout leaves out an arc beside a longer way, `withoutShortcuts` in
    ui/src/run/chains.ts: this shape is one chain, its other arcs arches over the row.)"""
    return _skipping("lattice500", n, lambda i: 2)


def tangle(n: int) -> str:
    """`n` steps, each with an arc to the next and one 3 to 20 steps on (never taken, the
    same ones every time): one chain too, with arcs over up to 19 steps (elkjs would give
    each a lane through every layer it spans: 5,000 more boxes)."""
    pick = random.Random(14)
    return _skipping("tangle500", n, lambda i: pick.randint(3, 20))


def mesh(n: int, rows: int = 20) -> str:
    """A grid of `rows` rows of n / rows steps, each leading right and (never taken) down:
    no arc beside a longer way, no chain, no fork that joins (a box per step for elkjs)."""
    cols = n // rows
    name = lambda r, c: "start" if r == c == 0 else f"m{r}_{c}"  # noqa: E731
    steps: list[dict[str, Any]] = []
    for r in range(rows):
        for c in range(cols):
            arcs = ([{"step": name(r, c + 1)}] if c + 1 < cols else []) + (
                [{"step": name(r + 1, c), "when": "{{ false }}"}] if r + 1 < rows else []
            )
            steps.append(
                {
                    "step": name(r, c),
                    "tool": {"kind": "noop"},
                    **({"next": {"arcs": arcs}} if arcs else {}),
                }
            )
    return _playbook("mesh500", steps)


def gated(gate: Path) -> str:
    code = (
        f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n"
        "    time.sleep(0.1)\nresult = 1"
    )
    return _playbook("held", [{"step": "start", "tool": {"kind": "python", "code": code}}])


async def _make_runs(url: str, runs: list[tuple[str, dict[str, Any]]], many: int = 0) -> list[int]:
    """Run each (playbook, workload) to its end; `many`: that many runs of the last one."""
    store = factory.open_store(url)
    try:
        async with EmbeddedEngine(store, concurrency=64) as engine:
            ids = []
            for text, workload in runs:
                ids.append(
                    (
                        await engine.run(load.load_text(text), text, workload, timeout=3600)
                    ).execution_id
                )
            text, workload = runs[-1]
            pb = load.load_text(text)
            for start in range(0, many, 1000):  # a thousand at a time: bounded memory
                batch = [engine.start(pb, text, workload) for _ in range(min(1000, many - start))]
                for xid in batch:
                    await engine.wait(xid)
            return ids
    finally:
        store.close()


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _cpu_ticks(root: int) -> int:
    """utime + stime of `root` and every process below it."""
    children: dict[int, list[int]] = {}
    stats: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        stats[pid] = int(fields[11]) + int(fields[12])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


def _emit(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def _sign_in(page: Any, base: str, token: str) -> None:
    from playwright.sync_api import expect

    page.goto(base + "/ui/")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=60_000)


# the page is interactive at the first animation frame where the run shows as ended, its
# step at its final status (and counts) and the timeline has a row: the time is read in the
# page, from the navigation's start (Playwright's `expect` would add its polling pauses,
# 100 ms to 1 s between checks, to the figure)
_READY = """([step, done]) => {
  const q = (id) => document.querySelector(`[data-testid="${id}"]`);
  const row = q("event-row");
  if (q("run-status")?.textContent.trim() !== "COMPLETED" || !row || !row.getClientRects().length
      || q(`step-${step}`)?.dataset.status !== "COMPLETED") return false;
  if (done && !(q(`iterations-${step}`)?.textContent ?? "").includes(done)) return false;
  return performance.now();
}"""
_ALL = """(count) => (document.querySelector('[data-testid="event-count"]')?.textContent.trim()
  === count) && performance.now()"""


def _run_page(
    page: Any, base: str, xid: int, step: str, done: str, events: int
) -> dict[str, float]:
    """Seconds to interactive (graph at its final counts, first timeline rows) and to the
    whole timeline, from a navigation with nothing cached but the app."""
    page.goto(f"{base}/ui/runs/{xid}")
    ready = page.wait_for_function(_READY, arg=[step, done], polling="raf", timeout=120_000)
    whole = page.wait_for_function(_ALL, arg=f"Events ({events:,})", polling="raf", timeout=600_000)
    return {
        "interactive_s": round(ready.json_value() / 1000, 3),
        "all_events_s": round(whole.json_value() / 1000, 3),
    }


PAGES = ["loop", "chain", "branchy", "forks", "lattice", "tangle", "mesh"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument(
        "--only",
        nargs="+",
        choices=PAGES,
        default=None,
        help="only these run pages (no idle CPU, no PostgreSQL runs list):"
        " a quick figure while working on the run page",
    )
    args = parser.parse_args()
    pages = args.only or PAGES
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp(prefix="milepost-ui-speed-"))
    summary: dict[str, Any] = {
        "summary": True,
        "iterations": args.iterations,
        "steps": args.steps,
        "runs": args.runs,
    }
    sqlite = f"sqlite:///{folder / 'runs.db'}"
    t0 = time.perf_counter()
    made = {
        "loop": (big_loop(), {"n": args.iterations}),
        "chain": (chain(args.steps), {}),
        "branchy": (branchy(args.steps), {}),
        "forks": (forks(args.steps), {}),
        "lattice": (lattice(args.steps), {}),
        "tangle": (tangle(args.steps), {}),
        "mesh": (mesh(args.steps), {}),
    }
    ids = dict(zip(pages, asyncio.run(_make_runs(sqlite, [made[p] for p in pages])), strict=True))
    _emit({"made": f"{' and '.join(pages)} runs", "s": round(time.perf_counter() - t0, 1)})
    with _pg_runs(args.runs if args.only is None else 0) as pg, sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            with milepost_ui(sqlite, folder) as (base, token, _):
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                _sign_in(page, base, token)
                done_of = {"loop": f"{args.iterations} done"}  # a loop's counts; else none
                for name in pages:
                    xid, step, done = ids[name], "start", done_of.get(name, "")
                    events = httpx.get(
                        f"{base}/api/executions/{xid}",
                        params={"events_limit": 0},
                        headers={"Authorization": f"Bearer {token}"},
                        timeout=60,
                    ).json()["last_seq"]
                    # first the server's first read of the run (its log folded), then again
                    cold = _run_page(page, base, xid, step, done, events)
                    page.goto(base + "/ui/runs")
                    figures = {
                        "first_visit": cold,
                        "again": _run_page(page, base, xid, step, done, events),
                    }
                    _emit({"page": f"run of {name}", "events": events, **figures})
                    summary[f"{name}_run_page"] = figures
                if args.only is None:
                    # a live run that does not change: what following its stream costs
                    gate = folder / "go"
                    held, driver = _start_held(sqlite, gated(gate), folder)
                    page.goto(f"{base}/ui/runs/{held}")
                    page.get_by_test_id("step-start").wait_for(timeout=60_000)
                    pid = browser_pid(browser)
                    c0, w0 = _cpu_ticks(pid), time.perf_counter()
                    page.wait_for_timeout(args.idle_s * 1000)  # the measuring window itself
                    share = (_cpu_ticks(pid) - c0) / TICKS / (time.perf_counter() - w0)
                    gate.write_text("")
                    driver.stop()
                    _emit(
                        {
                            "page": "live run, nothing changing",
                            "cpu_share_of_a_core": round(share, 4),
                        }
                    )
                    summary["idle_cpu_share"] = round(share, 4)
            if args.only is None:
                summary["runs_list"] = _runs_list(browser, folder, pg)
        finally:
            browser.close()
    _emit(summary)
    shutil.rmtree(folder, ignore_errors=True)
    return 0


def browser_pid(browser: Any) -> int:
    """The Chromium process Playwright launched (the root of its renderers)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"chromium") and b"--remote-debugging-pipe" in cmd:
                return int(entry)
    raise RuntimeError("no Chromium process found")


def _start_held(db: str, text: str, folder: Path) -> tuple[str, Proc]:
    """A run left waiting on a file gate, driven by `milepost run` in the background (the
    UI only reads): its id, once the run has one, and the process."""
    pb = folder / "held.yaml"
    pb.write_text(text)
    log = folder / "held.log"
    proc = Proc("held", [MILEPOST, "run", str(pb), "--db", db], clean_env(), log)
    store = factory.open_store(db)
    try:
        xid = wait_for(
            lambda: next(
                (r.execution_id for r in store.list_executions(path="bench/held", limit=1)), None
            ),
            "the held run to start",
            timeout=60,
        )
    finally:
        store.close()
    return str(xid), proc


@contextmanager
def _pg_runs(runs: int) -> Iterator[str]:
    """A fresh PostgreSQL database holding `runs` ended runs (dropped afterwards); none
    made when `runs` is 0."""
    if runs == 0:
        yield ""
        return
    name = f"milepost_uispeed_{uuid.uuid4().hex[:8]}"
    with _pg_connect(PG_ADMIN_URL) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"
    try:
        t0 = time.perf_counter()
        one = _playbook("one", [{"step": "start", "tool": {"kind": "noop"}}])
        seed = min(runs, 200)
        asyncio.run(_make_runs(url, [(one, {})], many=seed - 1))
        _clone(url, copies=-(-runs // seed) - 1)
        _emit({"made": f"{runs} runs on PostgreSQL", "s": round(time.perf_counter() - t0, 1)})
        yield url
    finally:
        with _pg_connect(PG_ADMIN_URL) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


SHIFT = 10**9
"""Ids of a copy: the original's minus copy * SHIFT (snowflakes of the past: unique, and
never an id the engine mints later)."""


def _clone(url: str, copies: int) -> None:
    """Copies of every run and its events, each copy a second older than the last: the
    engine made a few hundred runs; a list benchmark wants the rows, not hours of runs."""
    ids = ("execution_id", "event_id", "parent_event_id", "parent_execution_id")
    shifted = {c: f"{c} - n * {SHIFT}" for c in ids}
    shifted.update(created_at="created_at - n", updated_at="updated_at - n")
    with _pg_connect(url) as conn:
        for table in ("execution", "event"):
            cols = [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
                    " AND is_identity = 'NO' ORDER BY ordinal_position",
                    (table,),
                )
            ]
            values = [shifted.get(c, c) for c in cols]
            conn.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(values)}"
                f" FROM {table}, generate_series(1::bigint, %s::bigint) AS copies(n)",
                (copies,),
            )
        conn.execute("ANALYZE")


def _runs_list(browser: Any, folder: Path, url: str) -> dict[str, Any]:
    with milepost_ui(url, folder) as (base, token, _):
        headers = {"Authorization": f"Bearer {token}"}
        figures: dict[str, Any] = {}
        with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
            for label, params in (
                ("first page", {"limit": 50}),
                (
                    "completed, by playbook",
                    {"limit": 50, "status": "COMPLETED", "path": "bench/one"},
                ),
            ):
                walls = []
                for _ in range(20):
                    s = time.perf_counter()
                    http.get("/api/executions", params=params).raise_for_status()
                    walls.append(time.perf_counter() - s)
                figures[label] = round(statistics.median(walls) * 1000, 1)
                _emit({"api": f"runs list, {label}", "median_ms": figures[label]})
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        _sign_in(page, base, token)
        s = time.perf_counter()
        page.goto(base + "/ui/runs")
        page.locator("[data-testid=run-row]").first.wait_for(timeout=60_000)
        figures["page_s"] = round(time.perf_counter() - s, 3)
        _emit({"page": "runs list", "s": figures["page_s"]})
        return figures


if __name__ == "__main__":
    raise SystemExit(main())
