"""The shell and duckdb tools, and ToolRuntime dispatch (DSL 3.4)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml

from milepost.sanitize import Redactor
from milepost.tools import base
from milepost.tools.runtime import ToolRuntime

FIXTURE = Path("/work/shared/conformance/noetl/playbooks/duckdb_test.yaml")
FIXTURE_QUERY = (
    "CREATE TABLE users (id INTEGER, name VARCHAR, age INTEGER);\n"
    "INSERT INTO users VALUES (1, 'Alice', 30), (2, 'Bob', 25), (3, 'Charlie', 35);\n"
    "SELECT name, age FROM users WHERE age >= 30 ORDER BY age;\n"
)


def run(kind: str, timeout: float | None = None, **config: Any) -> base.ToolResult:
    async def go() -> base.ToolResult:
        async with ToolRuntime(1) as runtime:
            return await runtime.run(base.ToolCall(kind, config, {}, {}, "k", timeout=timeout))

    return asyncio.run(go())


def last(data: dict[str, Any]) -> dict[str, Any]:
    """The last statement's result, without the `command_<i>` keys beside it."""
    return {k: v for k, v in data.items() if not k.startswith("command_")}


# -- shell ---------------------------------------------------------------------------------


def test_shell_output() -> None:
    result = run("shell", command="echo out; echo err >&2")
    assert result.ok
    assert result.data == {"exit_code": 0, "stdout": "out\n", "stderr": "err\n"}


def test_shell_cwd_and_env(tmp_path: Path) -> None:
    result = run(
        "shell",
        command='pwd; echo "$GREETING"; command -v sh >/dev/null && echo path-ok',
        cwd=str(tmp_path),
        env={"GREETING": "hi"},
    )
    assert result.data["stdout"].splitlines() == [str(tmp_path), "hi", "path-ok"]


def test_shell_non_zero_exit_is_an_error_with_result() -> None:
    result = run("shell", command="echo partial; exit 3")
    assert result.error == base.ToolFailure(
        "exit_code", "shell command exited with code 3", code="3"
    )
    assert result.data == {"exit_code": 3, "stdout": "partial\n", "stderr": ""}


def test_shell_timeout_kills_the_command() -> None:
    result = run("shell", timeout=0.3, command="sleep 30 & wait")
    assert result.error is not None
    assert (result.error.kind, result.error.retryable) == ("timeout", True)


def test_shell_without_command_is_invalid() -> None:
    assert run("shell").error.kind == "invalid"  # type: ignore[union-attr]


# -- duckdb --------------------------------------------------------------------------------


def test_duckdb_fixture_query_matches_the_conformance_playbook() -> None:
    playbook = yaml.safe_load(FIXTURE.read_text()) if FIXTURE.exists() else None
    query = playbook["workflow"][0]["tool"][0]["query"] if playbook else FIXTURE_QUERY
    result = run("duckdb", database=":memory:", query=query)
    assert result.ok, result.error
    assert last(result.data) == {
        "columns": ["name", "age"],
        "rows": [{"name": "Alice", "age": 30}, {"name": "Charlie", "age": 35}],
        "row_count": 2,
    }


def test_duckdb_command_alias_and_affected_rows() -> None:
    result = run("duckdb", command="CREATE TABLE t (a INT); INSERT INTO t VALUES (1), (2), (3)")
    assert last(result.data) == {"affected_rows": 3}
    assert last(run("duckdb", command="CREATE TABLE t (a INT)").data) == {"affected_rows": 0}


def test_duckdb_database_defaults_to_a_fresh_memory_db() -> None:
    run("duckdb", query="CREATE TABLE t (a INT)")
    result = run("duckdb", query="SELECT * FROM t")
    assert result.error is not None and result.error.code == "CatalogException"


def test_duckdb_value_conversion() -> None:
    query = (
        "SELECT 2.50::DECIMAL(5,2) AS d, 7::DECIMAL(5,0) AS i, DATE '2024-02-29' AS day,"
        " TIMESTAMP '2024-01-02 03:04:05' AS ts, '00000000-0000-0000-0000-000000000001'::UUID AS u,"
        " 'ab'::BLOB AS b, '{\"k\": 1}'::JSON AS j, [1, 2] AS l, {'x': 1} AS s, INTERVAL 90 MINUTE AS iv"
    )
    (row,) = run("duckdb", query=query).data["rows"]
    assert row == {
        "d": 2.5,
        "i": 7,
        "day": "2024-02-29",
        "ts": "2024-01-02T03:04:05",
        "u": "00000000-0000-0000-0000-000000000001",
        "b": "YWI=",
        "j": '{"k": 1}',
        "l": [1, 2],
        "s": {"x": 1},
        "iv": "PT1H30M",
    }


def test_duckdb_error_rolls_back_the_whole_script(tmp_path: Path) -> None:
    database = str(tmp_path / "t.duckdb")
    assert run("duckdb", database=database, query="CREATE TABLE t (a INT)").ok
    failed = run(
        "duckdb", database=database, query="INSERT INTO t VALUES (1); SELECT * FROM missing"
    )
    assert failed.error is not None
    assert (failed.error.kind, failed.error.code) == ("db_error", "CatalogException")
    assert "missing" in failed.error.message
    assert run("duckdb", database=database, query="SELECT count(*) AS n FROM t").data["rows"] == [
        {"n": 0}
    ]


def test_duckdb_script_with_its_own_transaction(tmp_path: Path) -> None:
    database = str(tmp_path / "t.duckdb")
    result = run(
        "duckdb",
        database=database,
        query="BEGIN; CREATE TABLE t (a INT); INSERT INTO t VALUES (5); COMMIT; SELECT a FROM t",
    )
    assert result.data["rows"] == [{"a": 5}]


def test_duckdb_timeout_interrupts_the_query() -> None:
    result = run("duckdb", timeout=0.3, query="SELECT count(*) FROM range(1000000000000) a")
    assert result.error is not None
    assert (result.error.kind, result.error.retryable) == ("timeout", True)


@pytest.mark.parametrize("config", [{}, {"query": " ; -- nothing"}])
def test_duckdb_invalid(config: dict[str, Any]) -> None:
    assert run("duckdb", **config).error.kind == "invalid"  # type: ignore[union-attr]


def test_duckdb_driver_error_class_is_the_code() -> None:
    result = run("duckdb", query="SELEC 1")
    assert result.error is not None and result.error.code == type(_parser_error()).__name__


def _parser_error() -> Exception:
    try:
        duckdb.connect().execute("SELEC 1")
    except duckdb.Error as exc:
        return exc
    raise AssertionError("duckdb accepted bad SQL")


# -- runtime -------------------------------------------------------------------------------


def test_noop() -> None:
    result = run("noop")
    assert result == base.ToolResult(data={}, duration_ms=result.duration_ms)
    assert result.ok


def test_unknown_kind_is_invalid() -> None:
    result = run("teleport")
    assert result.error == base.ToolFailure("invalid", "unsupported tool kind 'teleport'")


def test_a_crashing_tool_is_logged_redacted_naming_its_execution_and_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def crashes(call: base.ToolCall) -> base.ToolResult:
        raise RuntimeError(f"cannot log in with {call.config['password']} or Bearer tok-12345678")

    async def go() -> base.ToolResult:
        async with ToolRuntime(1) as runtime:
            runtime._executors["noop"] = crashes
            call = base.ToolCall(
                "noop",
                {"password": "s3cr3t-xyz"},
                {},
                {},
                "k",
                execution_id="42",
                step="login",
                command_id="7",
                redact=Redactor(["s3cr3t-xyz"]).text,
            )
            return await runtime.run(call)

    caplog.set_level(logging.ERROR, logger="milepost.tools.runtime")
    result = asyncio.run(go())
    assert result.error is not None and result.error.code == "RuntimeError"
    (record,) = caplog.records
    assert "s3cr3t-xyz" not in caplog.text and "tok-12345678" not in caplog.text
    assert "cannot log in with *** or Bearer ***" in record.getMessage()
    assert "(execution 42 step login command 7)" in record.getMessage()
    assert (record.__dict__["execution_id"], record.__dict__["step"]) == ("42", "login")


def test_error_to_dict() -> None:
    assert base.ToolFailure("exception", "boom").to_dict() == {
        "kind": "exception",
        "message": "boom",
        "retryable": False,
        "code": None,
    }
    assert (
        base.ToolFailure("auth", "HTTP 401", code="HTTP_401", status=401).to_dict()["status"] == 401
    )


def test_runtime_runs_python_and_closes() -> None:
    async def go() -> tuple[base.ToolResult, list[int]]:
        runtime = ToolRuntime(python_workers=1)
        try:
            result = await runtime.run(
                base.ToolCall("python", {"code": "result = x + 1"}, {"x": 1}, {}, "k")
            )
            return result, runtime.python.pids
        finally:
            await runtime.aclose()

    result, pids = asyncio.run(go())
    assert result.data == 2 and len(pids) == 1
