"""The python tool on its pool of warm worker processes (DSL 3.1)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from milepost.tools import base
from milepost.tools.python import PythonPool


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
