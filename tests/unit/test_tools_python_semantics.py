"""The python tool's semantics (DSL 3.1), run in-process through the worker's Runner.

The pool itself (processes, timeouts, isolation) is covered by
tests/integration/test_tools_python_pool.py.
"""

from __future__ import annotations

import datetime as dt
import pickle
from typing import Any

import pytest

from milepost.tools import base, python_worker
from milepost.tools.python import _decode


def run(
    code: str,
    inputs: dict[str, Any] | None = None,
    *,
    libs: Any = None,
    context: dict[str, Any] | None = None,
) -> Any:
    """The reply of one call: ("ok", value, output, usage) or ("error", cls, text, output,
    traceback, at, usage)."""
    payload = pickle.dumps((code, dict(inputs or {}), context or {}, "key-9", libs), protocol=5)
    return pickle.loads(python_worker.Runner().handle(payload))


def value(code: str, inputs: dict[str, Any] | None = None, **kw: Any) -> Any:
    reply = run(code, inputs, **kw)
    assert reply[0] == "ok", reply
    return reply[1]


def test_result_global() -> None:
    assert value("result = {'double': n * 2}", {"n": 21}) == {"double": 42}


def test_result_none_falls_back_to_main() -> None:
    assert value("result = None\ndef main(n):\n    return n + 1", {"n": 1}) == 2


def test_main_gets_matching_inputs_only() -> None:
    assert value("def main(a, c=5):\n    return [a, c]", {"a": 1, "b": 2}) == [1, 5]


def test_main_with_kwargs_gets_all_inputs() -> None:
    assert value("def main(a, **rest):\n    return [a, rest]", {"a": 1, "b": 2}) == [1, {"b": 2}]


def test_main_may_ask_for_input_data() -> None:
    assert value("def main(input_data):\n    return sorted(input_data)", {"x": 1, "y": 2}) == [
        "x",
        "y",
    ]


def test_top_level_return() -> None:
    assert value("if n > 1:\n    return 'big'\nreturn 'small'", {"n": 2}) == "big"


def test_top_level_return__inputs_start_as_locals() -> None:
    assert value("n = n + 1\nreturn n", {"n": 1}) == 2


def test_top_level_return__nested_functions_and_imports() -> None:
    code = "import json\ndef twice(x):\n    return x * k\nk = 2\nreturn json.dumps([twice(i) for i in items])"
    assert value(code, {"items": [1, 2]}) == "[2, 4]"


def test_top_level_return__falling_through_uses_result() -> None:
    assert value("if n > 5:\n    return 'big'\nresult = 'small'", {"n": 1}) == "small"


def test_duckdb_fixture_process_code() -> None:
    code = (
        "query_results = input_data.get('query_results', [])\n"
        "if isinstance(query_results, list):\n"
        "    total = sum(row.get('age', 0) for row in query_results)\n"
        "    return {'status': 'success', 'total_users': len(query_results),"
        " 'average_age': total / len(query_results)}\n"
        "return {'status': 'error'}\n"
    )
    rows = [{"name": "Alice", "age": 30}, {"name": "Charlie", "age": 35}]
    assert value(code, {"query_results": rows}) == {
        "status": "success",
        "total_users": 2,
        "average_age": 32.5,
    }


def test_no_result_is_none() -> None:
    assert value("x = 1") is None


def test_globals() -> None:
    code = "result = [a, input_data, args, context, idempotency_key, __name__ != '__main__']"
    assert value(code, {"a": 1}, context={"workload": {"w": 1}}) == [
        1,
        {"a": 1},
        {"a": 1},
        {"workload": {"w": 1}},
        "key-9",
        True,
    ]


def test_input_named_input_data_is_used_as_is() -> None:
    assert value("result = [input_data, args]", {"input_data": [1, 2], "b": 3}) == [
        [1, 2],
        {"input_data": [1, 2], "b": 3},
    ]


def test_libs_mapping_and_list() -> None:
    assert value("result = [m.sqrt(16), p.join('a', 'b')]", libs={"m": "math", "p": "os.path"}) == [
        4.0,
        "a/b",
    ]
    assert value("result = os.path.basename('/x/y')", libs=["os.path"]) == "y"


def test_libs_from_import_binds_the_name_or_the_submodule() -> None:
    # DSL 12: {from: m, import: n} is `from m import n as alias`, a class or a submodule
    libs = {
        "dt": {"from": "datetime", "import": "datetime"},
        "pth": {"from": "os", "import": "path"},
        "ET": {"from": "xml.etree", "import": "ElementTree"},
    }
    code = "result = [dt(2025, 12, 11).date().isoformat(), pth.basename('/a/b'), ET.__name__]"
    assert value(code, libs=libs) == ["2025-12-11", "b", "xml.etree.ElementTree"]


def test_missing_lib_is_an_exception() -> None:
    reply = run("result = 1", libs={"x": "no_such_module_milepost"})
    assert reply[:3] == (
        "error",
        "ModuleNotFoundError",
        "No module named 'no_such_module_milepost'",
    )


def test_exception_shape() -> None:
    code = "raise ValueError('bad value')"
    result = _decode(
        python_worker.Runner().handle(pickle.dumps((code, {}, {}, "k", None))),
        base.ToolCall("python", {"code": code}, {}, {}, "k"),
    )
    assert result.error == base.ToolFailure(
        "exception", "ValueError: bad value", code="ValueError", line=1, code_line=code
    )
    assert result.data is None


def _failure(code: str) -> base.ToolFailure | None:
    reply = python_worker.Runner().handle(pickle.dumps((code, {}, {}, "k", None)))
    return _decode(reply, base.ToolCall("python", {"code": code}, {}, {}, "k")).error


@pytest.mark.parametrize(
    ("code", "line", "text"),
    [
        ("a = 1\nb = 0\nresult = a / b\n", 3, "result = a / b"),
        # the innermost line of the tool's code: in the function it called, not the call
        ("def f(x):\n    return x['nope']\n\nresult = f({})\n", 2, "return x['nope']"),
        # code with a top-level `return` runs as a function body: its lines stay the same
        ("x = 1\nif x:\n    return 1 / 0\n", 3, "return 1 / 0"),
        ("result = (1,\n", 1, "result = (1,"),  # a syntax error names its line too
    ],
)
def test_a_failure_names_the_line_of_code_that_raised(code: str, line: int, text: str) -> None:
    failure = _failure(code)
    assert failure is not None and (failure.line, failure.code_line) == (line, text), failure
    assert {"line": line, "code_line": text}.items() <= failure.to_dict().items()


def test_an_error_raised_in_a_library_names_the_tools_line_that_called_it() -> None:
    failure = _failure("import json\nresult = json.loads('{')\n")
    assert failure is not None and failure.code == "JSONDecodeError"
    assert (failure.line, failure.code_line) == (2, "result = json.loads('{')")


def test_syntax_error_is_an_exception() -> None:
    reply = run("result = (")
    assert reply[0] == "error" and reply[1] == "SyntaxError"


def test_system_exit_is_an_exception() -> None:
    assert run("import sys; sys.exit(3)")[:3] == ("error", "SystemExit", "3")


def test_print_is_captured_not_written() -> None:
    reply = run("print('hello'); import sys; print('oops', file=sys.stderr); result = 1")
    assert reply == ("ok", 1, [("stdout", "hello\n", 0), ("stderr", "oops\n", 0)], None)


def test_output_is_capped_keeping_head_and_tail() -> None:
    payload = pickle.dumps(
        ("print('a' * 1000 + 'b' * 5000 + 'c' * 1000, end='')", {}, {}, "k", None, 1024), protocol=5
    )
    [(stream, text, cut)] = pickle.loads(python_worker.Runner().handle(payload))[2]
    seam = 128  # dropped on each side of the cut (`core.logs.SEAM`)
    assert stream == "stdout" and cut == 7000 - 1024 + 2 * seam
    assert text == "a" * (512 - seam) + f"\n[... {cut} bytes cut ...]\n" + "c" * (512 - seam)


def test_traceback_quotes_the_code_from_its_first_frame() -> None:
    code = "def f(x):\n    return 1 / x\n\nprint('before')\nresult = f(0)\n"
    reply = run(code)
    assert reply[:3] == ("error", "ZeroDivisionError", "division by zero")
    trace, at = reply[4], reply[5]
    assert "python_worker" not in trace
    assert 'File "<python tool>", line 5, in <module>\n    result = f(0)' in trace
    assert 'File "<python tool>", line 2, in f\n    return 1 / x' in trace
    assert at == (2, "return 1 / x")
    result = _decode(
        python_worker.Runner().handle(pickle.dumps((code, {}, {}, "k", None))),
        base.ToolCall("python", {}, {}, {}, "k", step="divide"),
    )
    assert result.error is not None and result.error.to_dict()["line"] == 2
    assert [c.stream for c in result.logs] == ["stdout", "traceback"]
    assert 'File "<step divide>", line 2, in f' in result.logs[1].text


def test_result_is_converted_to_json_values() -> None:
    code = "import datetime\nclass P:\n    def __str__(self): return 'P!'\nresult = {1: (1, 2), 'd': datetime.date(2020, 1, 2), 'p': P(), 's': 'x'}"
    assert value(code) == {"1": [1, 2], "d": "2020-01-02", "p": "P!", "s": "x"}


def test_compile_cache_reuses_code_objects() -> None:
    runner = python_worker.Runner()
    payload = pickle.dumps(("result = n", {"n": 1}, {}, "k", None))
    runner.handle(payload)
    runner.handle(payload)
    assert list(runner._code) == ["result = n"]


class Text(str):
    pass


class Number(int):
    pass


class Things(list):  # type: ignore[type-arg]
    pass


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ((1, (2, 3)), [1, [2, 3]]),
        (Things([1, Things([2])]), [1, [2]]),
        ({1: "a", None: "b", ("t",): "c"}, {"1": "a", "None": "b", "('t',)": "c"}),
        (Text("abc"), "abc"),
        (Number(5), 5),
        ({"s": {1, 2}}, {"s": "{1, 2}"}),
        (dt.date(2020, 1, 1), "2020-01-01"),
        (b"ab", "b'ab'"),
        (float("inf"), float("inf")),
    ],
)
def test_to_jsonable(value: Any, expected: Any) -> None:
    converted = python_worker.to_jsonable(value)
    assert converted == expected
    assert pickle.loads(pickle.dumps(converted)) == expected


def test_to_jsonable__gives_exact_builtin_types() -> None:
    converted = python_worker.to_jsonable([Text("a"), Number(1), Things()])
    assert [type(x) for x in converted] == [str, int, list]


def test_to_jsonable__cycle_is_an_error() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match="cycle"):
        python_worker.to_jsonable(cyclic)
