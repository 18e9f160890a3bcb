"""The embedded engine as a transport over the engine service: claims, leases, cancels."""

from __future__ import annotations

import asyncio
import textwrap
import time
from pathlib import Path
from typing import Any

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine.embedded import EmbeddedEngine
from milepost.playbook import load
from milepost.store import port

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/lifecycle}\n"

GATED_LOOP = """
workflow:
  - step: start
    loop: {in: "{{ range(COUNT) | list }}", iterator: i, spec: {mode: parallel, max_in_flight: 8}}
    tool:
      kind: python
      input: {i: "{{ i }}"}
      code: |
        import os, time
        open("DIR/attempts", "a").write(str(i) + "\\n")
        deadline = time.monotonic() + 60
        while not os.path.exists("DIR/gate") and time.monotonic() < deadline:
            time.sleep(0.01)
        result = {"i": i}
"""


def gated(tmp_path: Path, count: int) -> tuple[Any, str]:
    text = HEADER + textwrap.dedent(
        GATED_LOOP.replace("DIR", str(tmp_path)).replace("COUNT", str(count))
    )
    return load.load_text(text), text


async def eventually(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def attempts(tmp_path: Path) -> list[str]:
    path = tmp_path / "attempts"
    return path.read_text().split() if path.exists() else []


def commands(store: Any, xid: int) -> list[port.CommandRow]:
    ids = [
        int(e.payload["command_id"]) for e in store.load(xid) if e.event_type == ev.COMMAND_ISSUED
    ]
    rows = store.get_commands(ids)
    return [rows[i] for i in ids]


def test_the_work_of_a_run_whose_cancel_was_requested_is_never_run(
    store: Any, tmp_path: Path
) -> None:
    pb, text = gated(tmp_path, 3)

    async def go() -> st.ExecutionState:
        async with EmbeddedEngine(store, concurrency=1) as engine:
            xid = engine.start(pb, text)
            await eventually(lambda: attempts(tmp_path) == ["0"])
            engine.cancel(xid)
            (tmp_path / "gate").touch()
            return await engine.wait(xid, timeout=30)

    state = asyncio.run(go())
    assert state.status == st.CANCELLED
    assert attempts(tmp_path) == ["0"]  # the two queued iterations never ran
    failed = [
        e.payload["error"]
        for e in store.load(state.execution_id)
        if e.event_type == ev.COMMAND_FAILED
    ]
    # the two queued iterations settled, the running one stopped (its process killed)
    assert [f["kind"] for f in failed] == ["cancelled"] * 3
    assert sorted(f["message"] for f in failed) == [
        "execution cancelled before the command ran"
    ] * 2 + ["execution cancelled: the attempt was stopped"]


def test_claims_are_made_for_free_slots_under_a_worker_id_of_the_engine(
    store: Any, tmp_path: Path
) -> None:
    pb, text = gated(tmp_path, 7)

    async def go() -> tuple[int, str, str]:
        async with (
            EmbeddedEngine(store, concurrency=2) as one,
            EmbeddedEngine(store, concurrency=2) as other,
        ):
            xid = one.start(pb, text)
            await eventually(lambda: len(attempts(tmp_path)) == 2)
            rows = commands(store, xid)
            # two workers, two slots each (the attempt it runs and the next): four commands
            # claimed, the other three wait in the store's queue
            assert sorted(r.status for r in rows) == ["claimed"] * 4 + ["queued"] * 3
            (tmp_path / "gate").touch()
            assert (await one.wait(xid, timeout=30)).status == st.COMPLETED
            return xid, one.workers.claimant, other.workers.claimant

    xid, mine, theirs = asyncio.run(go())
    assert mine != theirs
    # the other engine on the same database claimed none of this engine's run
    assert {r.worker_id for r in commands(store, xid)} == {mine}


def test_a_clean_exit_releases_the_claims_no_attempt_started(store: Any, tmp_path: Path) -> None:
    pb, text = gated(tmp_path, 2)

    async def go() -> int:
        async with EmbeddedEngine(store, concurrency=1) as engine:
            # one worker, two slots: the second command is claimed for it and never started
            xid = engine.start(pb, text)
            await eventually(lambda: len(attempts(tmp_path)) == 1)
            assert sorted(r.status for r in commands(store, xid)) == ["claimed", "claimed"]
            return xid

    xid = asyncio.run(go())
    (tmp_path / "gate").touch()
    # the started attempt keeps its claim (resume releases it); the other is queued again
    assert sorted(r.status for r in commands(store, xid)) == ["claimed", "queued"]


def test_a_long_attempt_heartbeats_its_claim(store: Any, tmp_path: Path) -> None:
    pb, text = gated(tmp_path, 1)

    async def go() -> None:
        async with EmbeddedEngine(store, lease_s=0.6) as engine:
            xid = engine.start(pb, text)
            await eventually(lambda: len(attempts(tmp_path)) == 1)
            first = commands(store, xid)[0].lease_expires_at
            assert first is not None
            await eventually(lambda: (commands(store, xid)[0].lease_expires_at or 0) > first)
            (tmp_path / "gate").touch()
            assert (await engine.wait(xid, timeout=30)).status == st.COMPLETED

    asyncio.run(go())


def test_resume_releases_the_dead_drivers_claim_and_claims_it_again(
    store: Any, tmp_path: Path
) -> None:
    pb, text = gated(tmp_path, 1)

    async def first_life() -> tuple[int, port.CommandRow]:
        async with EmbeddedEngine(store) as engine:
            xid = engine.start(pb, text)
            await eventually(lambda: len(attempts(tmp_path)) == 1)
            return xid, commands(store, xid)[0]

    xid, before = asyncio.run(first_life())  # left while the attempt ran: its claim stays
    assert before.status == port.COMMAND_CLAIMED

    async def second_life() -> tuple[port.CommandRow, str, st.ExecutionState]:
        async with EmbeddedEngine(store) as engine:
            engine.resume(xid)
            after = commands(store, xid)[0]
            (tmp_path / "gate").touch()
            return after, engine.workers.claimant, await engine.wait(xid, timeout=30)

    after, claimant, state = asyncio.run(second_life())
    assert after.command_id == before.command_id and after.attempt == before.attempt
    assert after.worker_id == claimant != before.worker_id
    assert after.epoch == before.epoch + 1
    assert state.status == st.COMPLETED and state.run_counts == {"start": 1}
    issued = [e for e in store.load(xid) if e.event_type == ev.COMMAND_ISSUED]
    assert len(issued) == 1  # the same command, not a new attempt
