"""The duckdb tool (DSL 3.4): a script run in one transaction on a fresh connection.

The script is `query` or `command`, a string or a list of strings (the loader turns NoETL's
`commands`, `cmds`, `queries` and `cmd` into `query`); the result is as postgres's
(`sql.script_result`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import duckdb

from milepost.tools import base, sql

MEMORY = ":memory:"


async def run(call: base.ToolCall) -> base.ToolResult:
    config = call.config
    statements = sql.script_statements(config.get("query", config.get("command")))
    if statements is None:
        return base.failure(
            "invalid", "duckdb tool needs `query` or `command` (a string or a list of strings)"
        )
    if not statements:
        return base.failure("invalid", "duckdb script holds no statement")
    database = config.get("database") or MEMORY
    job = Script(str(database), statements)
    task = asyncio.ensure_future(asyncio.to_thread(job.run))
    try:
        async with asyncio.timeout(call.timeout):
            return await asyncio.shield(task)
    except BaseException as exc:
        job.interrupt()
        await asyncio.wait({task}, timeout=5.0)  # let the interrupted thread unwind
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: the caller gets the timeout instead
        if isinstance(exc, TimeoutError):
            return base.failure(
                "timeout",
                f"duckdb script exceeded timeout of {call.timeout:g}s",
                code="Timeout",
                retryable=True,
            )
        raise


class Script:
    """Runs statements in order in one transaction; interruptible from another thread."""

    def __init__(self, database: str, statements: list[str]) -> None:
        self.database = database
        self.statements = statements
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._interrupted = False

    def interrupt(self) -> None:
        with self._lock:
            self._interrupted = True
            if self._con is not None:
                with contextlib.suppress(Exception):
                    self._con.interrupt()

    def run(self) -> base.ToolResult:
        try:
            con = duckdb.connect(self.database)
        except duckdb.Error as exc:
            return _db_error(exc)
        with self._lock:
            self._con = con
            interrupted = self._interrupted
        try:
            if interrupted:
                return base.failure("timeout", "duckdb script interrupted", retryable=True)
            return self._execute(con)
        finally:
            with self._lock:
                self._con = None
            con.close()

    def _execute(self, con: duckdb.DuckDBPyConnection) -> base.ToolResult:
        wrap = not any(sql.first_keyword(s) in sql.TRANSACTION_KEYWORDS for s in self.statements)
        try:
            if wrap:
                con.begin()
            results = []
            for statement in self.statements:
                con.execute(statement)
                results.append(statement_result(con, statement))
            data = sql.script_result(results)
            if wrap:
                con.commit()
        except duckdb.Error as exc:
            if wrap:
                with contextlib.suppress(duckdb.Error):
                    con.rollback()
            return _db_error(exc)
        return base.ToolResult(data=data)


def statement_result(con: duckdb.DuckDBPyConnection, statement: str) -> dict[str, Any]:
    """`{columns, rows, row_count}` if the statement returns rows, else `{affected_rows}`."""
    description = con.description
    if description is None:
        return {"affected_rows": 0}
    columns = [str(d[0]) for d in description]
    if columns in (["Count"], ["Success"]) and sql.first_keyword(statement) not in sql.ROW_KEYWORDS:
        row = con.fetchone() if columns == ["Count"] else None
        return {"affected_rows": int(row[0]) if row and row[0] is not None else 0}
    rows = [
        {name: sql.to_json_value(value) for name, value in zip(columns, row, strict=True)}
        for row in con.fetchall()
    ]
    return {"columns": columns, "rows": rows, "row_count": len(rows)}


def _db_error(exc: duckdb.Error) -> base.ToolResult:
    return base.failure("db_error", str(exc), code=type(exc).__name__)
