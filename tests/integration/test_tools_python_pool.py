"""The python tool on its pool of warm worker processes (DSL 3.1)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from milepost.tools import base
from milepost.tools.python import PythonPool
from tests import python_slots
from tests.shared import process_gone, wait_for_async


class Things(list):  # type: ignore[type-arg]
    """A list subclass the workers must unpickle (imported by name in the child)."""


@pytest.fixture(scope="module")
def pool() -> Iterator[PythonPool]:
    pool = PythonPool(2)
    try:
        yield pool
    finally:
        pool.close()


def call(code: str, inputs: dict[str, Any] | None = None, **fields: Any) -> base.ToolCall:
    config = {"code": code, **fields.pop("config", {})}
    return base.ToolCall(
        "python", config, dict(inputs or {}), fields.pop("context", {}), "idem-1", **fields
    )


def run(pool: PythonPool, *calls: base.ToolCall) -> list[base.ToolResult]:
    async def go() -> list[base.ToolResult]:
        return list(await asyncio.gather(*(pool.run(c) for c in calls)))

    return asyncio.run(go())


def ok(pool: PythonPool, code: str, inputs: dict[str, Any] | None = None, **fields: Any) -> Any:
    (result,) = run(pool, call(code, inputs, **fields))
    assert result.ok, result.error
    return result.data


def test_result_global(pool: PythonPool) -> None:
    assert ok(pool, "result = {'double': n * 2}", {"n": 21}) == {"double": 42}


def test_main(pool: PythonPool) -> None:
    assert ok(pool, "def main(a, b):\n    return a - b", {"b": 1, "a": 5, "c": 0}) == 4


def test_top_level_return(pool: PythonPool) -> None:
    assert ok(pool, "total = sum(xs)\nreturn {'total': total}", {"xs": [1, 2, 3]}) == {"total": 6}


def test_libs(pool: PythonPool) -> None:
    assert (
        ok(pool, "result = st.mean(xs)", {"xs": [1, 2, 3]}, config={"libs": {"st": "statistics"}})
        == 2
    )


def test_input_data_override_and_context(pool: PythonPool) -> None:
    got = ok(
        pool,
        "result = [input_data, context['workload'], idempotency_key]",
        {"input_data": {"x": 1}},
        context={"workload": {"w": 2}},
    )
    assert got == [{"x": 1}, {"w": 2}, "idem-1"]


def test_script_alias(pool: PythonPool) -> None:
    code_less = base.ToolCall(
        "python", {"script": {"source": {"type": "inline", "code": "result = 7"}}}, {}, {}, "k"
    )
    assert run(pool, code_less)[0].data == 7


def test_list_subclass_inputs(pool: PythonPool) -> None:
    assert ok(pool, "result = [type(xs).__name__, xs]", {"xs": Things([1, 2])}) == [
        "Things",
        [1, 2],
    ]


def test_loop_result_inputs(pool: PythonPool) -> None:
    loop_result = pytest.importorskip("milepost.playbook.loop_result").LoopResult(
        [{"v": 1}, {"v": 2}]
    )
    code = "result = {'n': len(r), 'stats': r.stats, 'first': r['results'][0]}"
    assert ok(pool, code, {"r": loop_result}) == {
        "n": 2,
        "stats": {"total": 2, "success": 2, "failed": 0},
        "first": {"v": 1},
    }


def test_exception(pool: PythonPool) -> None:
    (result,) = run(pool, call("raise KeyError('missing')"))
    assert result.error == base.ToolFailure(
        "exception",
        "KeyError: 'missing'",
        code="KeyError",
        retryable=False,
        line=1,
        code_line="raise KeyError('missing')",
    )
    assert result.data is None


def test_process_reuse(pool: PythonPool) -> None:
    first = ok(pool, "import os; result = os.getpid()")
    second = ok(pool, "import os; result = os.getpid()")
    assert first == second
    assert first in pool.pids


def test_timeout_kills_the_worker_and_the_pool_recovers(pool: PythonPool) -> None:
    victim = ok(pool, "import os; result = os.getpid()")
    (result,) = run(pool, call("import time\nwhile True: time.sleep(0.05)", timeout=0.5))
    assert result.error == base.ToolFailure(
        "timeout", "python code exceeded timeout of 0.5s", code="Timeout", retryable=True
    )
    assert victim not in pool.pids
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(victim, 0)
    assert ok(pool, "result = 'still working'") == "still working"


def test_dead_worker_is_replaced(pool: PythonPool) -> None:
    (result,) = run(pool, call("import os; os._exit(7)"))
    assert result.error == base.ToolFailure(
        "exception", "python worker process died", code="WorkerDied"
    )
    assert ok(pool, "result = 1") == 1


def test_workers_run_calls_in_parallel(pool: PythonPool) -> None:
    asyncio.run(pool.start())
    code = "import time\nstart = time.time()\ntime.sleep(0.5)\nresult = [start, time.time()]"
    first, second = run(pool, call(code), call(code))
    (s1, e1), (s2, e2) = first.data, second.data
    assert max(s1, s2) < min(e1, e2), "the two calls did not overlap"


def test_more_calls_than_workers_wait_their_turn(pool: PythonPool) -> None:
    results = run(
        pool, *(call("import os; result = [n, os.getpid()]", {"n": n}) for n in range(12))
    )
    assert [r.data[0] for r in results] == list(range(12))
    assert {r.data[1] for r in results} <= set(pool.pids)


def test_cancelled_call_kills_its_worker(pool: PythonPool, tmp_path: Path) -> None:
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    code = f"import os, time\nwith open({str(fifo)!r}, 'w') as f:\n    f.write(str(os.getpid()))\ntime.sleep(60)"

    async def go() -> int:
        task = asyncio.ensure_future(pool.run(call(code)))
        pid = int(await asyncio.to_thread(fifo.read_text))  # returns once the code runs
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pid

    victim = asyncio.run(go())
    assert victim not in pool.pids
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)
    assert ok(pool, "result = 2") == 2


def test_unpicklable_input_is_invalid(pool: PythonPool) -> None:
    (result,) = run(pool, call("result = 1", {"f": lambda: 1}))
    assert result.error is not None and result.error.kind == "invalid"


def test_missing_code_is_invalid(pool: PythonPool) -> None:
    (result,) = run(pool, base.ToolCall("python", {}, {}, {}, "k"))
    assert result.error is not None and result.error.kind == "invalid"


def test_output_goes_to_the_log_not_stdout(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="milepost.tools.python.output")
    pool = PythonPool(1)  # started under capfd, so its workers inherit the captured fds
    try:
        code = (
            "import os, sys\n"
            "print('printed-marker')\n"
            "sys.__stdout__.write('dunder-marker\\n'); sys.__stdout__.flush()\n"
            "os.write(1, b'fd-marker\\n')\n"
            "result = 1"
        )
        assert ok(pool, code) == 1
    finally:
        pool.close()
    out, err = capfd.readouterr()
    assert "marker" not in out
    assert "fd-marker" in err and "dunder-marker" in err
    assert "printed-marker" in caplog.text


def test_closed_pool_refuses_calls() -> None:
    pool = PythonPool(1)
    assert ok(pool, "result = 1") == 1
    pool.close()
    (result,) = run(pool, call("result = 1"))
    assert result.error is not None and result.error.code == "PoolClosed"


def test_one_pool_serves_event_loops_in_several_threads() -> None:
    pool = PythonPool(1)
    results: dict[int, list[Any]] = {}

    def worker_thread(n: int) -> None:
        calls = [call("result = [t, i]", {"t": n, "i": i}) for i in range(20)]
        results[n] = [r.data for r in run(pool, *calls)]

    try:
        threads = [threading.Thread(target=worker_thread, args=(n,)) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(pool.pids) == 1
    finally:
        pool.close()
    assert results == {n: [[n, i] for i in range(20)] for n in range(3)}


def test_large_payloads_both_ways_on_uvloop() -> None:
    """uvloop leaves a watched fd non-blocking: a payload over the socket buffer must still
    go out and come back whole, call after call on the same process."""
    import uvloop

    big = "x" * 3_000_000
    pool = PythonPool(1)

    async def go() -> list[base.ToolResult]:
        return [
            await pool.run(call("result = {'n': len(s), 's': s}", {"s": big})) for _ in range(3)
        ]

    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            results = runner.run(go())
    finally:
        pool.close()
    assert [r.ok for r in results] == [True, True, True], [r.error for r in results]
    assert all(r.data == {"n": len(big), "s": big} for r in results)


def test_one_worker_serves_a_selector_loop_after_uvloop_and_back() -> None:
    """A selector loop leaves the pipe as it is, so the pool makes it blocking only after a
    loop that may have changed it (uvloop): large payloads keep going whole either way."""
    import uvloop

    big = "y" * 3_000_000
    pool = PythonPool(1)

    async def go() -> base.ToolResult:
        return await pool.run(call("result = len(s)", {"s": big}))

    loops = [uvloop.new_event_loop, None, None, uvloop.new_event_loop, None]
    try:
        results = []
        for factory in loops:
            with asyncio.Runner(loop_factory=factory) as runner:
                results.append(runner.run(go()))
        pids = pool.pids
    finally:
        pool.close()
    assert [r.data for r in results] == [len(big)] * len(loops), [r.error for r in results]
    assert len(pids) == 1  # one process served every loop: none was replaced


# -- a pool that grows with its host's slots (issue 33, item 11) ------------------------------


def hold(out: Path, name: str = "c", i: int = 0) -> base.ToolCall:
    """A call holding its process until `out/go` exists (`tests.python_slots`)."""
    out.mkdir(parents=True, exist_ok=True)
    return call(python_slots.HOLD, {"out": str(out), "name": name, "i": i})


async def holding(pool: PythonPool, out: Path, count: int) -> tuple[dict[str, int], list[Any]]:
    """`count` holding calls at once: the markers once all hold a process, then the
    results once let go."""
    tasks = [asyncio.ensure_future(pool.run(hold(out, i=i))) for i in range(count)]
    found = await wait_for_async(
        lambda: (got := python_slots.started(out)) and len(got) == count and got,
        f"{count} calls holding a process each",
        timeout=60,
    )
    python_slots.let_go(out)
    results = await asyncio.gather(*tasks)
    assert all(r.ok for r in results), [r.error for r in results]
    return found, [r.data for r in results]


def test_calls_at_once_up_to_the_size_each_get_a_process_started_on_demand(tmp_path: Path) -> None:
    pool = PythonPool(4, warm=1)
    try:
        asyncio.run(pool.start())
        assert len(pool.pids) == 1  # the warm one only, until calls need more
        found, pids = asyncio.run(holding(pool, tmp_path, 4))
        assert len(set(pids)) == 4 and set(pids) == set(found.values()) == set(pool.pids)
    finally:
        pool.close()


def test_idle_processes_beyond_the_warm_ones_stop_after_their_idle_time(tmp_path: Path) -> None:
    # an idle time of hours: the pool's own retiring thread never wakes during the test
    # (it waits in real seconds), the test drives the clock and retires
    now = [100.0]
    pool = PythonPool(3, warm=1, idle_seconds=10_000, clock=lambda: now[0])
    try:
        _, pids = asyncio.run(holding(pool, tmp_path, 3))
        assert sorted(pids) == pool.pids
        now[0] += 9_999
        assert pool.retire_idle() == 0 and pool.pids == sorted(pids)
        now[0] += 1
        assert pool.retire_idle() == 2
        [kept] = pool.pids
        assert all(process_gone(pid) for pid in pids if pid != kept)
        now[0] += 100_000
        assert pool.retire_idle() == 0 and pool.pids == [kept]  # the warm one stays
        assert ok(pool, "import os; result = os.getpid()") == kept
    finally:
        pool.close()


def test_a_process_in_use_is_not_stopped_for_its_earlier_idleness(tmp_path: Path) -> None:
    now = [0.0]
    pool = PythonPool(2, warm=0, idle_seconds=10_000, clock=lambda: now[0])
    try:
        _, pids = asyncio.run(holding(pool, tmp_path / "first", 2))
        now[0] += 60_000

        async def busy_while_retiring() -> tuple[int, int]:
            task = asyncio.ensure_future(pool.run(hold(tmp_path / "second")))
            await wait_for_async(lambda: python_slots.started(tmp_path / "second"), "a call")
            retired = pool.retire_idle()  # the other one only
            python_slots.let_go(tmp_path / "second")
            return retired, (await task).data

        retired, busy = asyncio.run(busy_while_retiring())
        assert retired == 1 and pool.pids == [busy] and busy in pids
    finally:
        pool.close()


def test_a_start_that_fails_fails_one_call_and_the_next_call_starts_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from milepost.tools import python

    pool = PythonPool(1)
    spawn = python._spawn
    monkeypatch.setattr(python, "_spawn", lambda timeout: (_ for _ in ()).throw(OSError("boom")))
    try:
        (failed,) = run(pool, call("result = 1"))
        assert failed.error == base.ToolFailure(
            "exception", "python worker could not start: boom", code=None
        )
        monkeypatch.setattr(python, "_spawn", spawn)
        assert ok(pool, "result = 1") == 1
    finally:
        pool.close()


def test_a_worker_process_imports_nothing_of_its_parent(tmp_path: Path) -> None:
    """A spawned process re-imported the parent's `__main__`: for `milepost worker`, the
    whole CLI (~65 MB and ~0.9 s of CPU per process instead of ~16 MB and ~0.1 s)."""
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """\
            import asyncio, json, os
            from milepost.tools import base
            from milepost.tools.python import PythonPool

            with open(__file__ + ".ran", "a") as f:  # each time this module runs
                f.write(f"{os.getpid()}\\n")
            CODE = "import sys; result = 'milepost.tools.python' in sys.modules"
            if __name__ == "__main__":
                pool = PythonPool(1)
                done = asyncio.run(pool.run(base.ToolCall("python", {"code": CODE}, {}, {}, "k")))
                pool.close()
                print(json.dumps(done.data))
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout) is False
    assert len((tmp_path / "parent.py.ran").read_text().split()) == 1, "ran in the worker too"


# a host's slots, over time: a call of some run starts (while a slot is free), or one ends
Step = tuple[str, int]
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("call"), st.integers(0, 2)), st.tuples(st.just("end"), st.integers(0, 9))
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(size=st.integers(1, 3), warm=st.integers(0, 3), steps=STEPS)
def test_no_call_waits_on_another_while_its_host_has_a_free_slot(
    size: int, warm: int, steps: list[Step]
) -> None:
    """The class of issue 33 item 11: whatever runs the calls come from and in whatever
    order they start and end, every call the host runs (at most `size`, its slots) holds a
    process of its own at once; none waits for another's to end."""

    async def host(root: Path, pool: PythonPool) -> None:
        running: dict[int, tuple[Path, asyncio.Future[base.ToolResult]]] = {}
        for n, (what, arg) in enumerate(steps):
            if what == "call" and len(running) < size:
                out = root / str(n)
                running[n] = (out, asyncio.ensure_future(pool.run(hold(out, f"run{arg}", n))))
            elif what == "end" and running:
                out, task = running.pop(sorted(running)[arg % len(running)])
                python_slots.let_go(out)
                assert (await task).ok
            await wait_for_async(
                lambda: all(python_slots.started(out) for out, _ in running.values()),
                f"all {len(running)} calls holding a process (pool size {size})",
                timeout=60,
            )
        for out, task in running.values():
            python_slots.let_go(out)
            assert (await task).ok

    with tempfile.TemporaryDirectory() as root:
        pool = PythonPool(size, warm=warm)
        try:
            asyncio.run(host(Path(root), pool))
            assert len(pool.pids) <= size
        finally:
            pool.close()
