"""The NoETL forms of the shell, duckdb and postgres tools (DSL 12, 3.3, 3.4): shell
`cmds`, duckdb and postgres scripts given as lists, and the `command_<i>` keys of a SQL
script's result."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from milepost.tools import base, shell
from tests.integration.test_tools_postgres import admin, creds, ok, pg, schema  # noqa: F401
from tests.integration.test_tools_postgres import run as run_pg
from tests.integration.test_tools_shell_duckdb import run
from tests.shared import process_gone, wait_for, wait_for_async

# -- shell cmds ----------------------------------------------------------------------------


def test_cmds_run_in_order_and_gather_their_results() -> None:
    result = run("shell", cmds=["echo one", "echo two >&2", "echo three"])
    assert result.ok, result.error
    assert result.data == {
        "exit_code": 0,
        "stdout": "one\nthree\n",
        "stderr": "two\n",
        "results": [
            {"exit_code": 0, "stdout": "one\n", "stderr": ""},
            {"exit_code": 0, "stdout": "", "stderr": "two\n"},
            {"exit_code": 0, "stdout": "three\n", "stderr": ""},
        ],
    }


def test_cmds_each_run_in_their_own_shell(tmp_path: Path) -> None:
    # a variable set by one command is gone in the next: they are separate `sh -c`
    result = run("shell", cmds=["X=1; echo ${X:-unset}", "echo ${X:-unset}"], cwd=str(tmp_path))
    assert [r["stdout"] for r in result.data["results"]] == ["1\n", "unset\n"]


def test_cmds_stop_at_the_first_non_zero_exit(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = run("shell", cmds=["echo ok", "echo bad >&2; exit 4", f"touch {marker}"])
    assert result.error == base.ToolFailure(
        "exit_code", "shell command 2 of 3 exited with code 4", code="4"
    )
    assert result.data["exit_code"] == 4
    assert [r["exit_code"] for r in result.data["results"]] == [0, 4]
    assert (result.data["stdout"], result.data["stderr"]) == ("ok\n", "bad\n")
    assert not marker.exists()


def test_a_single_string_cmds_is_one_command() -> None:
    result = run("shell", cmds="echo hi")
    assert result.data["results"] == [{"exit_code": 0, "stdout": "hi\n", "stderr": ""}]


def test_cmd_is_command() -> None:
    result = run("shell", cmd="echo hi")
    assert result.data == {"exit_code": 0, "stdout": "hi\n", "stderr": ""}


@pytest.mark.parametrize(
    "config",
    [
        {"cmds": []},
        {"cmds": ["true", 3]},
        {"cmds": ["true", " "]},
        {"cmds": ["true"], "command": "x"},
    ],
)
def test_bad_cmds_are_invalid(config: dict[str, Any]) -> None:
    assert run("shell", **config).error.kind == "invalid"  # type: ignore[union-attr]


def test_the_timeout_covers_the_whole_list(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = run("shell", timeout=0.5, cmds=["true", "sleep 30", f"touch {marker}"])
    assert result.error is not None
    assert (result.error.kind, result.error.retryable) == ("timeout", True)
    assert not marker.exists()


@pytest.mark.parametrize("running", [0, 1])
def test_a_cancel_kills_the_running_command_and_starts_no_other(
    tmp_path: Path, running: int
) -> None:
    """Whichever command of the list runs when the attempt is cancelled is stopped (its
    shell is killed and reaped), and the commands after it never start."""
    pid_file, marker = tmp_path / "pid", tmp_path / "ran"
    waiting = f"echo $$ > {pid_file}; sleep 30"
    cmds = ["true"] * running + [waiting, f"touch {marker}"]

    async def go() -> int:
        task = asyncio.create_task(shell.run(base.ToolCall("shell", {"cmds": cmds}, {}, {}, "k")))
        await wait_for_async(lambda: pid_file.exists() and pid_file.read_text().strip(), "pid")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return int(pid_file.read_text())

    pid = asyncio.run(go())
    wait_for(lambda: process_gone(pid), "the cancelled command to die", timeout=5)
    assert not marker.exists()


# -- duckdb --------------------------------------------------------------------------------


def test_duckdb_result_has_a_command_key_per_statement() -> None:
    result = run(
        "duckdb",
        query=[
            "CREATE TABLE t (a INT); INSERT INTO t VALUES (1), (2)",
            "SELECT a FROM t ORDER BY a",
            "UPDATE t SET a = a + 1",
        ],
    )
    assert result.ok, result.error
    assert result.data == {
        "affected_rows": 2,
        "command_0": {
            "status": "success",
            "row_count": 0,
            "message": "Command executed. 0 rows affected.",
        },
        "command_1": {
            "status": "success",
            "row_count": 2,
            "message": "Command executed. 2 rows affected.",
        },
        "command_2": {
            "status": "success",
            "columns": ["a"],
            "rows": [{"a": 1}, {"a": 2}],
            "row_count": 2,
        },
        "command_3": {
            "status": "success",
            "row_count": 2,
            "message": "Command executed. 2 rows affected.",
        },
    }


def test_duckdb_command_may_be_a_list() -> None:
    result = run("duckdb", command=["SELECT 1 AS a", "SELECT 2 AS b"])
    assert (result.data["rows"], result.data["command_0"]["rows"]) == ([{"b": 2}], [{"a": 1}])


@pytest.mark.parametrize("query", [[], ["SELECT 1", 2], ["-- nothing"]])
def test_duckdb_bad_lists_are_invalid(query: list[Any]) -> None:
    assert run("duckdb", query=query).error.kind == "invalid"  # type: ignore[union-attr]


# -- postgres ------------------------------------------------------------------------------


def test_postgres_result_has_a_command_key_per_statement(pg: dict[str, str], schema: str) -> None:  # noqa: F811
    script = f"""
        CREATE TABLE {schema}.t (id INT, name TEXT);
        INSERT INTO {schema}.t VALUES (1, 'a'), (2, 'b');
        SELECT id, name FROM {schema}.t ORDER BY id;
        DELETE FROM {schema}.t WHERE id = 2
    """
    data = ok(run_pg(creds(pg=pg), auth="pg", command=script))
    assert data == {
        "affected_rows": 1,
        "command_0": {
            "status": "success",
            "row_count": 0,
            "message": "Command executed. 0 rows affected.",
        },
        "command_1": {
            "status": "success",
            "row_count": 2,
            "message": "Command executed. 2 rows affected.",
        },
        "command_2": {
            "status": "success",
            "columns": ["id", "name"],
            "rows": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
            "row_count": 2,
        },
        "command_3": {
            "status": "success",
            "row_count": 1,
            "message": "Command executed. 1 rows affected.",
        },
    }


def test_postgres_command_list_and_a_last_select(pg: dict[str, str], schema: str) -> None:  # noqa: F811
    data = ok(
        run_pg(
            creds(pg=pg),
            auth="pg",
            schema=schema,
            query=["CREATE TABLE t (a INT)", "INSERT INTO t VALUES (%s)", "SELECT a FROM t"],
            params=[7],
        )
    )
    assert (data["rows"], data["row_count"]) == ([{"a": 7}], 1)
    assert data["command_1"]["row_count"] == 1
    assert data["command_2"] == {
        "status": "success",
        "columns": ["a"],
        "rows": [{"a": 7}],
        "row_count": 1,
    }


def test_a_cancel_while_the_shell_is_being_started_still_kills_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a cancel that lands after the shell started but before its transport
    was handed back (a busy loop) left the shell's children running; asyncio killed the
    shell alone and then waited for the children, which hold its pipes, to end (30 s)."""
    pid_file = tmp_path / "pid"
    real = asyncio.create_subprocess_exec
    handed_back = asyncio.Event()

    async def slow_to_hand_back(*args: Any, **kwargs: Any) -> Any:
        proc = await real(*args, **kwargs)
        await handed_back.wait()  # the cancel lands here, the shell running
        return proc

    monkeypatch.setattr(shell.asyncio, "create_subprocess_exec", slow_to_hand_back)
    command = f"sleep 30 & echo $! > {pid_file}; wait"

    async def go() -> int:
        task = asyncio.create_task(
            shell.run(base.ToolCall("shell", {"command": command}, {}, {}, "k"))
        )
        await wait_for_async(lambda: pid_file.exists() and pid_file.read_text().strip(), "pid")
        task.cancel()
        await asyncio.sleep(0)  # let the cancel reach the start before it is handed back
        handed_back.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        return int(pid_file.read_text())

    child = asyncio.run(go())
    wait_for(lambda: process_gone(child), "the shell's child to die with its group", timeout=5)
