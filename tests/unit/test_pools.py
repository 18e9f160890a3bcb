"""Pools (DSL 10.6): `spec.pool` / `executor.spec.pool` at load, the pool a command is issued
in and published to, and which pools have queued commands and no live worker."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import pytest

from milepost.core import events as ev
from milepost.engine import notify, summaries, unattended, worker_pools, workers
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.orchestrator import Orchestrator
from milepost.errors import PlaybookInvalid
from milepost.playbook import load
from milepost.store import port
from milepost.store.memory import MemoryStore

PLAYBOOK = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: pools, path: tests/pools}
    executor: {spec: {pool: cpu-small}}
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
        spec: {pool: default}
        next: train
      - step: train
        tool: {kind: python, code: "result = 2"}
        spec: {pool: gpu.a100_x}
        next: report
      - step: report
        tool: {kind: postgres, pool: {size: 5}, query: "select 1"}
    """)


def problems(text: str) -> list[str]:
    with pytest.raises(PlaybookInvalid) as info:
        load.load_text(text, source="inline.yaml")
    return info.value.problems


def test_a_step_s_pool_is_its_own_else_the_executor_s_else_none() -> None:
    pb = load.load_text(PLAYBOOK)
    assert pb.executor.pool == "cpu-small"
    assert [pb.steps[s].spec.pool for s in ("start", "train", "report")] == [
        "default",
        "gpu.a100_x",
        "cpu-small",
    ]
    # a tool's own `pool:` is a connection-pool setting, not routing: dropped, not a pool
    assert "pool" not in pb.steps["report"].tasks[0].config
    plain = load.load_text(PLAYBOOK.replace("executor: {spec: {pool: cpu-small}}\n", ""))
    assert plain.executor.pool is None and plain.steps["report"].spec.pool is None


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("step", "''"),
        ("step", "'gpu a100'"),
        ("step", "gpu/x"),
        ("step", "[gpu]"),
        ("step", "'" + "g" * 101 + "'"),
        ("executor", "'gpu:1'"),
        ("executor", "5"),
    ],
)
def test_a_bad_pool_name_is_refused_naming_the_field(where: str, value: str) -> None:
    text = PLAYBOOK.replace("spec: {pool: gpu.a100_x}", f"spec: {{pool: {value}}}")
    if where == "executor":
        text = PLAYBOOK.replace("pool: cpu-small", f"pool: {value}")
    found = problems(text)
    assert len(found) == 1, found
    field = "step 'train': spec.pool" if where == "step" else "executor.spec.pool"
    assert found[0].startswith(f"{field}: invalid pool name "), found
    assert "letters, digits, '-', '_' and '.'" in found[0]


class Recorder(notify.NullPublisher):
    def __init__(self) -> None:
        self.notices: list[notify.Notice] = []

    def notify(self, notices: Sequence[notify.Notice]) -> None:
        self.notices.extend(notices)


def _service() -> tuple[MemoryStore, Lifecycle, Recorder]:
    store = MemoryStore()
    publisher = Recorder()
    now = [1000.0]
    service = Lifecycle(
        store, Orchestrator(store, clock=lambda: now[0], machine_id=1), publisher=publisher
    )
    return store, service, publisher


def _answer(service: Lifecycle, row: port.CommandRow, lease: port.Lease) -> None:
    done = ev.new_event(
        service.new_id(),
        row.execution_id,
        ev.COMMAND_COMPLETED,
        service.clock(),
        step=row.step,
        payload={
            "command_id": row.command_id,
            "run": row.run,
            "index": row.index,
            "attempt": row.attempt,
            "result": {"status": "ok"},
        },
        meta={"epoch": lease.epoch},
    )
    service.report([done])


def test_commands_are_issued_claimed_and_published_in_their_step_s_pool() -> None:
    store, service, publisher = _service()
    pb = load.load_text(PLAYBOOK)
    _, version = service.register(PLAYBOOK, pb)
    xid, _ = service.start(pb, version, {})
    assert service.claim_next("w-gpu", 30.0, 5, pool="gpu.a100_x") == []  # start: default
    [(row, lease)] = service.claim_next("w", 30.0, 5, pool="default")
    assert (row.step, row.pool) == ("start", "default")
    _answer(service, row, lease)
    assert service.claim_next("w", 30.0, 5, pool="default") == []  # train is not default's
    [(row, lease)] = service.claim_next("w-gpu", 30.0, 5, pool="gpu.a100_x")
    assert (row.step, row.pool) == ("train", "gpu.a100_x")
    _answer(service, row, lease)
    [(row, _)] = service.claim_next("any", 30.0, 5)  # pool None: every pool (embedded)
    assert (row.step, row.pool) == ("report", "cpu-small")
    issued = {e.step: e.payload for e in store.load(xid) if e.event_type == ev.COMMAND_ISSUED}
    # the default pool is left out of the payload: logs of runs without pools are unchanged
    assert "pool" not in issued["start"]
    assert (issued["train"]["pool"], issued["report"]["pool"]) == ("gpu.a100_x", "cpu-small")
    assert [(n.pool, notify.subject(n.pool)) for n in publisher.notices] == [
        ("default", "milepost.commands.default"),
        ("gpu.a100_x", "milepost.commands.gpu.a100_x"),
        ("cpu-small", "milepost.commands.cpu-small"),
    ]


def test_a_worker_s_lease_holder_names_its_pool() -> None:
    assert worker_pools.holder("w1", "default") == "worker:w1"  # as before pools
    assert worker_pools.holder("h:1/ab", "gpu") == "worker@gpu:h:1/ab"


def test_queued_commands_of_a_pool_with_no_live_worker_are_missing_a_worker() -> None:
    store, service, _ = _service()
    text = PLAYBOOK.replace("spec: {pool: default}\n", "spec: {pool: gpu.a100_x}\n")
    pb = load.load_text(text)
    _, version = service.register(text, pb)
    xid, _ = service.start(pb, version, {})
    [missing] = service.missing_workers(xid)
    assert missing.as_dict() == {
        "pool": "gpu.a100_x",
        "commands": 1,
        "steps": ["start"],
        "message": "no live worker of pool gpu.a100_x",
    }
    assert worker_pools.counts(service.missing_workers()) == {"gpu.a100_x": 1}
    workers.check_in(store, 1000.0, workers.CheckIn("w/1", "w"))
    assert service.missing_workers(xid) != []  # a default worker does not serve gpu
    # nor do an embedded engine's workers (they take only the runs it drives)
    workers.check_in(store, 1000.0, workers.CheckIn("e/1", "e", "gpu.a100_x", workers.EMBEDDED))
    assert service.missing_workers(xid) != []
    workers.check_in(store, 990.0, workers.CheckIn("g/1", "g", "gpu.a100_x", ttl=10.0))
    assert service.missing_workers(xid) != []  # seen 10 s ago with a ttl of 10 s: lost
    workers.check_in(store, 1000.0, workers.CheckIn("g/1", "g", "gpu.a100_x", ttl=10.0))
    assert service.missing_workers(xid) == []
    store.forget_workers(worker_key="g/1")
    assert [m.pool for m in service.missing_workers(xid)] == ["gpu.a100_x"]
    # an embedded engine drives the run: its in-process workers run every pool
    store.acquire_driver(xid, "run:h:1:ab", 1000.0, 15.0)
    assert service.missing_workers(xid) == []
    assert unattended.undriven(service, xid) is None  # and it is alive
    # once that driver is gone its commands wait for a driver (a resume), not a worker
    store.release_driver(xid, "run:h:1:ab", 1000.0)
    assert service.missing_workers(xid) == []
    assert unattended.undriven(service, xid) == {
        "holder": "run:h:1:ab",
        "commands": 1,
        "steps": ["start"],
        "message": "no process drives this run",
    }


def test_the_summary_names_the_pool_each_waiting_step_has_no_worker_for() -> None:
    summary = {
        "execution_id": "1",
        "status": "RUNNING",
        "error": None,
        "steps": {"a": {"status": "COMPLETED"}, "train": {"status": "RUNNING"}},
    }
    assert summaries.with_missing_workers(summary, []) is summary
    missing = worker_pools.Missing("gpu", 2, {"train"})
    out = summaries.with_missing_workers(summary, [missing])
    assert out["steps"]["train"]["waiting"] == "no live worker of pool gpu"
    assert "waiting" not in out["steps"]["a"] and "waiting" not in summary["steps"]["train"]
    assert out["no_live_worker"] == [
        {"pool": "gpu", "commands": 2, "steps": ["train"], "message": "no live worker of pool gpu"}
    ]
