"""milepost.tools.sql: statement splitting and driver value conversion (DSL 3.3)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import uuid

import pytest

from milepost.tools import sql

SPLIT_CASES = [
    ("empty", "", []),
    ("only whitespace and semicolons", " ;\n ; ", []),
    ("one statement without semicolon", "SELECT 1", ["SELECT 1"]),
    ("trailing semicolon", "SELECT 1;", ["SELECT 1"]),
    ("two statements", "SELECT 1; SELECT 2;", ["SELECT 1", "SELECT 2"]),
    (
        "newlines kept inside",
        "CREATE TABLE t (\n a INT\n);\nSELECT 1",
        ["CREATE TABLE t (\n a INT\n)", "SELECT 1"],
    ),
    ("semicolon in single quotes", "SELECT 'a;b'; SELECT 2", ["SELECT 'a;b'", "SELECT 2"]),
    ("doubled single quote", "SELECT 'it''s;'; SELECT 2", ["SELECT 'it''s;'", "SELECT 2"]),
    (
        "semicolon in double quotes",
        'SELECT 1 AS "a;b"; SELECT 2',
        ['SELECT 1 AS "a;b"', "SELECT 2"],
    ),
    ("E-string backslash escape", r"SELECT E'a\';b'; SELECT 2", [r"SELECT E'a\';b'", "SELECT 2"]),
    ("backslash in plain string", "SELECT 'a\\'; SELECT 2", ["SELECT 'a\\'", "SELECT 2"]),
    ("line comment", "SELECT 1 -- no; split\n; SELECT 2", ["SELECT 1 -- no; split", "SELECT 2"]),
    ("block comment", "SELECT /* ; */ 1; SELECT 2", ["SELECT /* ; */ 1", "SELECT 2"]),
    (
        "nested block comment",
        "SELECT /* a /* ; */ ; */ 1; SELECT 2",
        ["SELECT /* a /* ; */ ; */ 1", "SELECT 2"],
    ),
    ("comment-only statement dropped", "SELECT 1; -- the end", ["SELECT 1"]),
    ("block-comment-only statement dropped", "SELECT 1; /* bye; */ ;", ["SELECT 1"]),
    ("leading comment kept", "-- first\nSELECT 1; SELECT 2", ["-- first\nSELECT 1", "SELECT 2"]),
    (
        "dollar quoted body",
        "CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql; SELECT 2",
        ["CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql", "SELECT 2"],
    ),
    (
        "tagged dollar quote containing $$",
        "DO $body$ BEGIN PERFORM $$;$$; END $body$; SELECT 2",
        ["DO $body$ BEGIN PERFORM $$;$$; END $body$", "SELECT 2"],
    ),
    (
        "positional parameters are not dollar quotes",
        "SELECT $1; SELECT $2",
        ["SELECT $1", "SELECT $2"],
    ),
    (
        "dollar inside identifier",
        "SELECT a$b$c FROM t; SELECT 2",
        ["SELECT a$b$c FROM t", "SELECT 2"],
    ),
    (
        "quote inside comment ignored",
        "SELECT 1 -- it's\n; SELECT 2",
        ["SELECT 1 -- it's", "SELECT 2"],
    ),
    ("comment marker inside string", "SELECT '--;'; SELECT 2", ["SELECT '--;'", "SELECT 2"]),
    ("unterminated string swallows the rest", "SELECT 'a; SELECT 2", ["SELECT 'a; SELECT 2"]),
]


@pytest.mark.parametrize(
    ("script", "expected"), [c[1:] for c in SPLIT_CASES], ids=[c[0] for c in SPLIT_CASES]
)
def test_split_statements(script: str, expected: list[str]) -> None:
    assert sql.split_statements(script) == expected


def test_split_statements__duckdb_fixture_script() -> None:
    script = (
        "CREATE TABLE users (id INTEGER, name VARCHAR, age INTEGER);\n"
        "INSERT INTO users VALUES (1, 'Alice', 30), (2, 'Bob', 25), (3, 'Charlie', 35);\n"
        "SELECT name, age FROM users WHERE age >= 30 ORDER BY age;\n"
    )
    assert [sql.first_keyword(s) for s in sql.split_statements(script)] == [
        "CREATE",
        "INSERT",
        "SELECT",
    ]


@pytest.mark.parametrize(
    ("statement", "keyword"),
    [
        ("select 1", "SELECT"),
        ("  -- c\n/* d */ with x as (select 1) select * from x", "WITH"),
        ("(SELECT 1) UNION (SELECT 2)", "SELECT"),
        ("insert into t values (1)", "INSERT"),
        ("", ""),
    ],
)
def test_first_keyword(statement: str, keyword: str) -> None:
    assert sql.first_keyword(statement) == keyword


UTC = dt.UTC
VALUE_CASES = [
    ("none", None, None),
    ("int", 3, 3),
    ("float", 2.5, 2.5),
    ("bool", True, True),
    ("text and json text stay", '{"k": 1}', '{"k": 1}'),
    ("integral decimal", decimal.Decimal("42"), 42),
    ("decimal with fraction digits", decimal.Decimal("2.50"), 2.5),
    ("decimal 30.00 stays a float", decimal.Decimal("30.00"), 30.0),
    ("date", dt.date(2024, 2, 29), "2024-02-29"),
    ("time", dt.time(13, 5, 7), "13:05:07"),
    ("naive datetime", dt.datetime(2024, 1, 2, 3, 4, 5), "2024-01-02T03:04:05"),
    ("aware datetime", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), "2024-01-02T03:04:05+00:00"),
    ("interval", dt.timedelta(days=1, hours=2, seconds=1.5), "P1DT2H1.5S"),
    ("zero interval", dt.timedelta(0), "PT0S"),
    ("negative interval", dt.timedelta(minutes=-5), "-PT5M"),
    ("uuid", uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
    ("bytes", b"\x00ab", base64.b64encode(b"\x00ab").decode()),
    ("memoryview", memoryview(b"xy"), "eHk="),
    (
        "nested",
        {"a": [decimal.Decimal("1"), (dt.date(2020, 1, 1),)], 2: {"u": None}},
        {"a": [1, ["2020-01-01"]], "2": {"u": None}},
    ),
    ("other objects pass through str", complex(1, 2), "(1+2j)"),
]


@pytest.mark.parametrize(
    ("value", "expected"), [c[1:] for c in VALUE_CASES], ids=[c[0] for c in VALUE_CASES]
)
def test_to_json_value(value: object, expected: object) -> None:
    converted = sql.to_json_value(value)
    assert converted == expected
    assert type(converted) is type(expected)


def test_script_statements_of_a_string_or_a_list() -> None:
    assert sql.script_statements("SELECT 1; SELECT 2") == ["SELECT 1", "SELECT 2"]
    assert sql.script_statements(["SELECT 1; SELECT 2", "SELECT 3;"]) == [
        "SELECT 1",
        "SELECT 2",
        "SELECT 3",
    ]
    assert sql.script_statements(["-- nothing", ""]) == []
    assert sql.script_statements(None) is None
    assert sql.script_statements(["SELECT 1", 2]) is None


def test_script_result_keeps_the_last_and_adds_a_command_key_per_statement() -> None:
    rows = {"columns": ["a"], "rows": [{"a": 1}], "row_count": 1}
    assert sql.script_result([{"affected_rows": 3}, rows]) == {
        **rows,
        "command_0": {
            "status": "success",
            "row_count": 3,
            "message": "Command executed. 3 rows affected.",
        },
        "command_1": {"status": "success", **rows},
    }
