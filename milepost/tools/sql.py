"""SQL helpers shared by the postgres and duckdb tools (DSL 3.3).

`split_statements` cuts a script on `;` outside quotes, comments and dollar-quoted blocks;
`script_statements` does so for a tool's `query`/`command` (a string or a list);
`script_result` shapes a script's result; `to_json_value` turns driver values into JSON values.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import uuid
from collections.abc import Mapping
from typing import Any

# Statements whose first keyword says they return rows even when the driver reports a
# single `Count`/`Success` column.
ROW_KEYWORDS = frozenset(
    {
        "SELECT",
        "WITH",
        "VALUES",
        "TABLE",
        "FROM",
        "SHOW",
        "DESCRIBE",
        "SUMMARIZE",
        "EXPLAIN",
        "PRAGMA",
        "CALL",
        "PIVOT",
        "UNPIVOT",
    }
)
TRANSACTION_KEYWORDS = frozenset({"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT"})


def split_statements(sql: str) -> list[str]:
    """Split a script into statements.

    Splits on `;` outside single-quoted strings (`''` escapes, `E'..'` backslash escapes),
    double-quoted identifiers, `--` line comments, `/* */` block comments (nested) and
    dollar-quoted blocks (`$$ .. $$`, `$tag$ .. $tag$`). Statements are stripped; those
    holding only whitespace and comments are dropped.
    """
    statements: list[str] = []
    start = 0
    i = 0
    n = len(sql)
    while i < n:
        ch = sql[i]
        if ch == ";":
            _append(statements, sql[start:i])
            start = i + 1
            i += 1
        elif ch == "'":
            i = _skip_quoted(sql, i, "'", backslash=_is_escape_string(sql, i))
        elif ch == '"':
            i = _skip_quoted(sql, i, '"', backslash=False)
        elif ch == "-" and sql.startswith("--", i):
            i = _skip_line_comment(sql, i)
        elif ch == "/" and sql.startswith("/*", i):
            i = _skip_block_comment(sql, i)
        elif ch == "$":
            i = _skip_dollar(sql, i)
        else:
            i += 1
    _append(statements, sql[start:])
    return statements


def script_statements(script: Any) -> list[str] | None:
    """The statements of a tool's `query`/`command`: a string split by `split_statements`,
    or a list of such strings (NoETL's `commands: [...]`), each split in turn, in order;
    None when it is neither."""
    if isinstance(script, str):
        return split_statements(script)
    if isinstance(script, list) and all(isinstance(s, str) for s in script):
        return [statement for text in script for statement in split_statements(text)]
    return None


def script_result(results: list[dict[str, Any]]) -> dict[str, Any]:
    """A script's result (DSL 3.3): the last statement's own result (`{columns, rows,
    row_count}` or `{affected_rows}`), and, as NoETL's postgres tool gives it, one
    `command_<i>` key per statement (0-based, in order) that playbooks read as
    `{{ step.data.command_0.rows }}`."""
    data = dict(results[-1])
    for index, result in enumerate(results):
        data[f"command_{index}"] = _command_entry(result)
    return data


def _command_entry(result: dict[str, Any]) -> dict[str, Any]:
    if "rows" in result:
        return {"status": "success", **result}
    count = result.get("affected_rows", 0)
    return {
        "status": "success",
        "row_count": count,
        "message": f"Command executed. {count} rows affected.",  # NoETL's wording
    }


def strip_comments(sql: str) -> str:
    """`sql` without its comments (quoted text kept), used to find a statement's keyword."""
    out: list[str] = []
    i = 0
    n = len(sql)
    while i < n:
        ch = sql[i]
        if ch == "-" and sql.startswith("--", i):
            i = _skip_line_comment(sql, i)
            out.append(" ")
            continue
        if ch == "/" and sql.startswith("/*", i):
            i = _skip_block_comment(sql, i)
            out.append(" ")
            continue
        if ch == "'":
            end = _skip_quoted(sql, i, "'", backslash=_is_escape_string(sql, i))
        elif ch == '"':
            end = _skip_quoted(sql, i, '"', backslash=False)
        elif ch == "$":
            end = _skip_dollar(sql, i)
        else:
            end = i + 1
        out.append(sql[i:end])
        i = end
    return "".join(out)


def first_keyword(statement: str) -> str:
    """The upper-cased first word of a statement, comments and parentheses skipped."""
    text = strip_comments(statement).lstrip(" \t\r\n(")
    word = []
    for ch in text:
        if not (ch.isalnum() or ch == "_"):
            break
        word.append(ch)
    return "".join(word).upper()


def _append(statements: list[str], text: str) -> None:
    text = text.strip()
    if text and strip_comments(text).strip():
        statements.append(text)


def _is_escape_string(sql: str, quote: int) -> bool:
    """True for Postgres `E'...'` strings, where a backslash escapes the next character."""
    if quote == 0 or sql[quote - 1] not in "eE":
        return False
    return quote == 1 or not (sql[quote - 2].isalnum() or sql[quote - 2] in "_$")


def _skip_quoted(sql: str, i: int, quote: str, *, backslash: bool) -> int:
    """Index just past the quoted run starting at `i` (doubled quotes stay inside)."""
    n = len(sql)
    j = i + 1
    while j < n:
        ch = sql[j]
        if backslash and ch == "\\":
            j += 2
            continue
        if ch == quote:
            if j + 1 < n and sql[j + 1] == quote:
                j += 2
                continue
            return j + 1
        j += 1
    return n


def _skip_line_comment(sql: str, i: int) -> int:
    end = sql.find("\n", i)
    return len(sql) if end < 0 else end + 1


def _skip_block_comment(sql: str, i: int) -> int:
    depth = 0
    n = len(sql)
    j = i
    while j < n:
        if sql.startswith("/*", j):
            depth += 1
            j += 2
        elif sql.startswith("*/", j):
            depth -= 1
            j += 2
            if depth == 0:
                return j
        else:
            j += 1
    return n


def _skip_dollar(sql: str, i: int) -> int:
    """Past a `$tag$ ... $tag$` block starting at `i`, or just past the `$` if there is none."""
    if i > 0 and (sql[i - 1].isalnum() or sql[i - 1] in "_$"):
        return i + 1  # part of an identifier such as `a$b`
    close = sql.find("$", i + 1)
    if close < 0:
        return i + 1
    tag = sql[i + 1 : close]
    if tag and not (tag.replace("_", "a").isalnum() and not tag[0].isdigit()):
        return i + 1  # `$1` parameters and the like
    delimiter = sql[i : close + 1]
    end = sql.find(delimiter, close + 1)
    return len(sql) if end < 0 else end + len(delimiter)


def to_json_value(value: Any) -> Any:
    """A driver value as a JSON value (DSL 3.3).

    Decimals become int (integral, no fraction digits) or float; dates, times and datetimes
    ISO-8601 strings; timedeltas ISO-8601 durations; uuids strings; bytes base64; lists,
    tuples and mappings are converted recursively (keys become strings); JSON text stays
    text; anything else passes through `str`.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, decimal.Decimal):
        return _decimal(value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return iso_duration(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json_value(v) for v in value]
    return str(value)


def _decimal(value: decimal.Decimal) -> int | float | str:
    if not value.is_finite():
        return float(value) if not value.is_snan() else str(value)
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent >= 0:
        return int(value)
    return float(value)


def iso_duration(value: dt.timedelta) -> str:
    """`timedelta(days=1, seconds=3661.5)` -> `P1DT1H1M1.5S`."""
    sign = "-" if value < dt.timedelta(0) else ""
    value = abs(value)
    hours, rest = divmod(value.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    secs: str = str(seconds)
    if value.microseconds:
        secs = f"{seconds}.{value.microseconds:06d}".rstrip("0")
    date_part = f"{value.days}D" if value.days else ""
    time_part = "".join(f"{n}{unit}" for n, unit in ((hours, "H"), (minutes, "M")) if n) + (
        f"{secs}S" if seconds or value.microseconds else ""
    )
    if not date_part and not time_part:
        return "PT0S"
    return f"{sign}P{date_part}" + (f"T{time_part}" if time_part else "")
