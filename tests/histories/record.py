"""Record the stored histories: run playbooks on the embedded engine, keep events + meaning.

    .venv/bin/python -m tests.histories.record [scenario...]   # writes the missing ones
    .venv/bin/python -m tests.histories.record --force sealed  # records one again

Each file holds the event logs of one scenario's executions (a parent and its child
are two) and, at a few cut points of each log, the meaning of its fold
(`meaning.meaning`). `test_replay` folds the stored events again and compares: a change
to `fold` that alters what an old run means fails there. Record again only when the
engine is meant to write different histories from now on, and keep the old file beside
the new one under another name (old runs are in real databases and must still read the
same): an existing file is never overwritten without --force.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.engine.embedded import EmbeddedEngine
from milepost.engine.orchestrator import Orchestrator
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from tests.histories.meaning import event_to_json, meaning

HERE = Path(__file__).resolve().parent
MARKERS = "MILEPOST_HISTORY_MARKERS"
"""A folder the flaky step marks its first attempt in (kept out of the workload, so no
temporary path is written into the histories)."""


def _pb(path: str, body: str) -> str:
    return (
        f"apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {{name: {path}, path: {path}}}\n{body}"
    )


@dataclass(frozen=True)
class Scenario:
    text: str
    workload: dict[str, Any] = field(default_factory=dict)
    children: tuple[str, ...] = ()
    cancel: bool = False
    """Request the cancel as soon as the run has started (its first command is queued)."""
    status: str = st.COMPLETED


SCENARIOS = {
    "sequential": Scenario(
        _pb(
            "history/sequential",
            """
workload: {n: 3}
workflow:
  - step: start
    tool: {kind: python, input: {n: "{{ workload.n }}"}, code: "result = {'n': n + 1}"}
    set: {ctx.seen: "{{ start.n }}"}
    next: double
  - step: double
    tool: {kind: python, input: {n: "{{ start.n }}"}, code: "result = {'n': n * 2}"}
""",
        )
    ),
    "loop_retry": Scenario(
        _pb(
            "history/loop_retry",
            """
workflow:
  - step: start
    loop: {in: "{{ [1, 2, 3] }}", iterator: i, spec: {mode: parallel, max_in_flight: 2}}
    spec: {retry: {max_attempts: 3, backoff: fixed, delay: 0.05, retry_on: [exception]}}
    tool:
      kind: python
      input: {i: "{{ i }}"}
      code: |
        import os
        mark = os.path.join(os.environ["MILEPOST_HISTORY_MARKERS"], str(i))
        if i == 2 and not os.path.exists(mark):
            open(mark, "w").close()
            raise RuntimeError("flaky once")
        result = {"sq": i * i}
    next: total
  - step: total
    tool: {kind: python, input: {rows: "{{ start }}"}, code: "result = sum(r['sq'] for r in rows)"}
""",
        )
    ),
    "failure": Scenario(
        _pb(
            "history/failure",
            """
workflow:
  - step: start
    tool: {kind: python, code: "result = {'ok': True}"}
    next: broken
  - step: broken
    tool: {kind: python, code: "raise ValueError('no good')"}
    next: never
  - step: never
    tool: {kind: noop}
""",
        ),
        status=st.FAILED,
    ),
    "cancel": Scenario(
        _pb(
            "history/cancel",
            """
workflow:
  - step: start
    tool: {kind: python, code: "result = {'ok': True}"}
    next: never
  - step: never
    tool: {kind: noop}
""",
        ),
        cancel=True,
        status=st.CANCELLED,
    ),
    "child": Scenario(
        _pb(
            "history/parent",
            """
workflow:
  - step: start
    tool: {kind: playbook, path: history/child, input: {x: 4}, return_step: start}
""",
        ),
        children=(
            _pb(
                "history/child",
                """
workload: {x: 1}
workflow:
  - step: start
    tool: {kind: python, input: {x: "{{ workload.x }}"}, code: "result = {'double': x * 2}"}
""",
            ),
        ),
    ),
    "teardown": Scenario(
        _pb(
            "history/teardown",
            """
executor: {spec: {teardown: [tidy, report]}}
workflow:
  - step: start
    tool: {kind: python, code: "result = {'ok': True}"}
    spec: {compensation: undo}
    next: broken
  - step: broken
    tool: {kind: python, code: "raise ValueError('no good')"}
  - step: undo
    tool: {kind: python, code: "result = {'undone': True}"}
  - step: tidy
    tool: {kind: python, input: {t: "{{ teardown }}"}, code: "raise ValueError(t['status'])"}
  - step: report
    tool: {kind: python, input: {t: "{{ teardown }}"}, code: "result = {'saw': t['status']}"}
""",
        ),
        status=st.FAILED,
    ),
    "sealed": Scenario(
        _pb(
            "history/sealed",
            """
workflow:
  - step: start
    tool:
      kind: python
      input: {password: "{{ workload.password }}", user: "{{ workload.user }}"}
      code: "result = {'ok': password == 'hunter2', 'user': user}"
""",
        ),
        workload={"password": "hunter2", "user": "ada"},
    ),
}


async def _run(store: SQLiteStore, scenario: Scenario) -> int:
    async with EmbeddedEngine(store, concurrency=2, python_workers=1) as engine:
        for child in scenario.children:
            engine.orchestrator.register(child, load.load_text(child))
        xid = engine.start(load.load_text(scenario.text), scenario.text, scenario.workload)
        if scenario.cancel:
            engine.cancel(xid)
        state = await engine.wait(xid, timeout=60)
    if state.status != scenario.status:
        raise SystemExit(
            f"execution {xid} ended {state.status}, not {scenario.status}: {state.error}"
        )
    return xid


CUT_AFTER = (
    ev.COMMAND_ISSUED,
    ev.COMMAND_COMPLETED,
    ev.COMMAND_FAILED,
    ev.COMMAND_RETRY_SCHEDULED,
    ev.EXECUTION_CANCEL_REQUESTED,
    ev.LOOP_DONE,
    ev.TEARDOWN_STARTED,
    ev.TEARDOWN_FAILED,
)
"""A log is cut after the first event of each of these types (a live command, a
result, a failure awaiting its retry, a cancel in flight, a loop's end, a teardown begun
and a teardown step failed) and at its end;
the meaning of each prefix is pinned."""


def cuts(events: list[ev.Event]) -> list[int]:
    types = [e.event_type for e in events]
    return sorted({types.index(t) + 1 for t in CUT_AFTER if t in types} | {len(events)})


def record(name: str, scenario: Scenario, folder: Path) -> dict[str, Any]:
    os.environ[MARKERS] = str(folder)
    store = SQLiteStore(folder / f"{name}.db")
    try:
        xid = asyncio.run(_run(store, scenario))
        xids = [xid] + [
            r.execution_id for r in store.list_executions() if r.parent_execution_id == xid
        ]
        executions = []
        for x in xids:
            events = store.load(x)
            folded, engine_state = fl.fold(None, events), Orchestrator(store).state(x)
            # the engine opened a sealed workload; the log holds it masked
            opened = {**meaning(engine_state), "workload": folded.workload}
            if meaning(folded) != opened:
                raise SystemExit(f"{name}: the fold of the log differs from the engine's state")
            executions.append(
                {
                    "events": [event_to_json(e) for e in events],
                    "meanings": {str(k): meaning(fl.fold(None, events[:k])) for k in cuts(events)},
                }
            )
        return {
            "scenario": name,
            "playbooks": [scenario.text, *scenario.children],
            "executions": executions,
        }
    finally:
        store.close()


def dumps(history: dict[str, Any]) -> str:
    """JSON with one event or meaning a line: small, and a diff shows what changed."""

    def one(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))

    def execution(x: dict[str, Any]) -> str:
        events = ",\n".join(f"   {one(e)}" for e in x["events"])
        meanings = ",\n".join(f"   {one(k)}:{one(m)}" for k, m in x["meanings"].items())
        return f' {{"events":[\n{events}],\n  "meanings":{{\n{meanings}}}}}'

    executions = ",\n".join(execution(x) for x in history["executions"])
    return (
        f'{{"scenario":{one(history["scenario"])},\n"playbooks":{one(history["playbooks"])},\n'
        f'"executions":[\n{executions}]}}\n'
    )


def main(args: list[str]) -> None:
    force = "--force" in args
    names = [a for a in args if a != "--force"] or list(SCENARIOS)
    for name in names:
        path = HERE / f"{name}.json"
        if path.exists() and not force:
            print(f"{path.name}: kept (--force records it again)")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            history = record(name, SCENARIOS[name], Path(tmp))
        path.write_text(dumps(history))
        print(f"{path.name}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
