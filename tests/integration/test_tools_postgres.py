"""The postgres tool (DSL 3.3) against a real PostgreSQL.

`MILEPOST_TEST_PG_URL` (default `postgresql://postgres@127.0.0.1:5432/test`) names the
database. Every test works in its own schema, dropped afterwards. Without a reachable server
the tests are skipped, except under CI (`CI=true`), where that is a failure.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jinja2
import psycopg
import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from milepost.credentials import Vault, new_key
from milepost.store.memory import MemoryStore
from milepost.tools import base
from milepost.tools.postgres.statements import bind_params, placeholders
from milepost.tools.runtime import ToolRuntime
from tests.shared import IN_CI, PLAYBOOKS, needs_shared, wait_for, wait_for_async

PG_URL = os.environ.get("MILEPOST_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
PASSWORD = "hunter2-very-secret"
Lookup = Callable[[str], Mapping[str, Any] | None]


def _unreachable() -> str | None:
    try:
        with psycopg.connect(PG_URL, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return str(exc).strip()


_REASON = _unreachable()


@pytest.fixture(scope="module")
def pg() -> dict[str, str]:
    """The test database's parameters as credential data (the port a string)."""
    if _REASON is not None:
        if IN_CI:
            pytest.fail(f"CI needs PostgreSQL at {PG_URL}: {_REASON}")
        pytest.skip(f"no PostgreSQL at {PG_URL}: {_REASON}")
    info = conninfo_to_dict(PG_URL)
    return {
        "type": "postgres",
        "host": str(info.get("host", "127.0.0.1")),
        "port": str(info.get("port", "5432")),
        "user": str(info.get("user", "postgres")),
        "password": str(info.get("password", "")),
        "database": str(info.get("dbname", "test")),
    }


@pytest.fixture
def admin(pg: dict[str, str]) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        yield conn


@pytest.fixture
def schema(admin: psycopg.Connection[tuple[Any, ...]]) -> Iterator[str]:
    name = f"mp_test_{uuid.uuid4().hex[:12]}"
    admin.execute(f"CREATE SCHEMA {name}")
    try:
        yield name
    finally:
        admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def call(config: dict[str, Any], timeout: float | None = None) -> base.ToolCall:
    return base.ToolCall("postgres", config, {}, {}, "key", timeout=timeout)


def run(credentials: Lookup | None, timeout: float | None = None, **config: Any) -> base.ToolResult:
    return run_many(credentials, [config], timeout)[0]


def run_many(
    credentials: Lookup | None, configs: list[dict[str, Any]], timeout: float | None = None
) -> list[base.ToolResult]:
    """Several calls, in order, on one runtime (so on its cached connections)."""

    async def go() -> list[base.ToolResult]:
        async with ToolRuntime(1, credentials=credentials) as runtime:
            return [await runtime.run(call(c, timeout)) for c in configs]

    return asyncio.run(go())


def creds(**entries: Mapping[str, Any]) -> Lookup:
    return entries.get


def ok(result: base.ToolResult) -> Any:
    assert result.error is None, result.error
    return result.data


def last(result: base.ToolResult) -> Any:
    """The last statement's result, without the `command_<i>` keys beside it."""
    return {k: v for k, v in ok(result).items() if not k.startswith("command_")}


def one(admin: psycopg.Connection[tuple[Any, ...]], query: str) -> Any:
    row = admin.execute(query).fetchone()
    assert row is not None
    return row[0]


# -- scripts and results -------------------------------------------------------------------


def test_multi_statement_ddl_and_dml_in_one_call(
    pg: dict[str, str], schema: str, admin: psycopg.Connection[tuple[Any, ...]]
) -> None:
    script = f"""
        -- a table, three rows, then an update: the result is the update's
        CREATE TABLE {schema}.users (id INT PRIMARY KEY, name TEXT, age INT);
        INSERT INTO {schema}.users VALUES (1, 'Alice', 30), (2, 'Bob; Jr.', 25), (3, 'Carl', 35);
        UPDATE {schema}.users SET age = age + 1 WHERE age >= 30
    """
    assert last(run(creds(pg=pg), auth="pg", command=script)) == {"affected_rows": 2}
    assert one(admin, f"SELECT count(*) FROM {schema}.users") == 3

    select = f"DELETE FROM {schema}.users WHERE id = 3; SELECT name, age FROM {schema}.users ORDER BY id;"
    assert last(run(creds(pg=pg), auth="pg", query=select)) == {
        "columns": ["name", "age"],
        "rows": [{"name": "Alice", "age": 31}, {"name": "Bob; Jr.", "age": 25}],
        "row_count": 2,
    }
    ddl_last = (
        f"INSERT INTO {schema}.users VALUES (9, 'Z', 1); CREATE INDEX ON {schema}.users (age)"
    )
    assert last(run(creds(pg=pg), auth="pg", command=ddl_last)) == {"affected_rows": 0}
    returning = f"INSERT INTO {schema}.users VALUES (10, 'Y', 2) RETURNING id, name"
    assert last(run(creds(pg=pg), auth="pg", command=returning)) == {
        "columns": ["id", "name"],
        "rows": [{"id": 10, "name": "Y"}],
        "row_count": 1,
    }
    empty = f"SELECT * FROM {schema}.users WHERE false"
    assert last(run(creds(pg=pg), auth="pg", command=empty)) == {
        "columns": ["id", "name", "age"],
        "rows": [],
        "row_count": 0,
    }


def test_select_with_params(pg: dict[str, str], schema: str) -> None:
    setup = f"""
        CREATE TABLE {schema}.t (id INT, name TEXT, profile JSONB);
        INSERT INTO {schema}.t VALUES (1, 'a', '{{"k": 1}}'), (2, 'b', NULL), (3, '100%', NULL)
    """
    ok(run(creds(pg=pg), auth="pg", command=setup))
    query = f"SELECT id, name FROM {schema}.t WHERE id >= %s AND name <> %s ORDER BY id"
    assert ok(run(creds(pg=pg), auth="pg", command=query, params=[2, "b"]))["rows"] == [
        {"id": 3, "name": "100%"}
    ]
    # params spread over the statements by their placeholders; a literal % elsewhere is fine
    script = f"""
        UPDATE {schema}.t SET name = name || '%' WHERE id = 1;
        INSERT INTO {schema}.t (id, name, profile) VALUES (%s, %s, %s);
        SELECT name, profile FROM {schema}.t WHERE id = %s
    """
    data = ok(run(creds(pg=pg), auth="pg", command=script, params=[4, "d", {"tags": ["x", 1]}, 4]))
    assert data["rows"] == [{"name": "d", "profile": {"tags": ["x", 1]}}]
    named = f"SELECT name FROM {schema}.t WHERE id = %(id)s OR name = %(name)s ORDER BY id"
    data = ok(run(creds(pg=pg), auth="pg", command=named, params={"id": 1, "name": "b"}))
    assert data["rows"] == [{"name": "a%"}, {"name": "b"}]
    assert ok(run(creds(pg=pg), auth="pg", command="SELECT %s AS one", params=7))["rows"] == [
        {"one": 7}
    ]


def test_params_that_do_not_match_the_placeholders_are_invalid(pg: dict[str, str]) -> None:
    for script, params in [("SELECT %s; SELECT %s", [1]), ("SELECT 1", [1]), ("SELECT %s", [])]:
        result = run(creds(pg=pg), auth="pg", command=script, params=params)
        if params:
            assert result.error is not None and result.error.kind == "invalid", script
            assert "placeholder" in result.error.message
        else:  # no params: %s is not a placeholder for psycopg, the server sees it
            assert result.error is not None and result.error.kind == "db_error"


def test_placeholder_counting() -> None:
    assert placeholders("SELECT %s, %(a)s, '100%', %%s, %b, %t") == (3, {"a"})
    assert bind_params(["SELECT 1", "SELECT %s, %s", "SELECT %s"], [1, 2, 3]) == [
        ("SELECT 1", None),
        ("SELECT %s, %s", [1, 2]),
        ("SELECT %s", [3]),
    ]


def test_type_conversions(pg: dict[str, str], schema: str) -> None:
    script = f"""
        CREATE TABLE {schema}.typed (
          j JSON, jb JSONB, n NUMERIC(10, 2), whole NUMERIC, i BIGINT, f DOUBLE PRECISION,
          d DATE, ts TIMESTAMP, tstz TIMESTAMPTZ, t TIME, u UUID, b BYTEA, ok BOOLEAN,
          arr TEXT[], iv INTERVAL, inf DATE
        );
        INSERT INTO {schema}.typed VALUES (
          '{{"a": [1, 2.5, null, "x"]}}', '{{"nested": {{"deep": true}}}}', 12.50, 7,
          9007199254740993, 0.25, '2024-02-29', '2024-02-29 13:45:01.5',
          '2024-02-29 13:45:01+00', '23:59:59', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
          '\\x00ff10'::bytea, true, ARRAY['p', 'q'], '1 day 02:03:04', 'infinity'
        );
        SET LOCAL TIME ZONE 'UTC';
        SELECT * FROM {schema}.typed;
    """
    data = ok(run(creds(pg=pg), auth="pg", command=script))
    assert data["rows"] == [
        {
            "j": {"a": [1, 2.5, None, "x"]},
            "jb": {"nested": {"deep": True}},
            "n": 12.5,
            "whole": 7,
            "i": 9007199254740993,
            "f": 0.25,
            "d": "2024-02-29",
            "ts": "2024-02-29T13:45:01.500000",
            "tstz": "2024-02-29T13:45:01+00:00",
            "t": "23:59:59",
            "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "b": "AP8Q",
            "ok": True,
            "arr": ["p", "q"],
            "iv": "P1DT2H3M4S",
            "inf": "infinity",
        }
    ]
    assert type(data["rows"][0]["whole"]) is int and type(data["rows"][0]["n"]) is float
    scalars = ok(
        run(creds(pg=pg), auth="pg", command="SELECT '\"text\"'::jsonb AS s, '[]'::json AS l")
    )
    assert scalars["rows"] == [{"s": "text", "l": []}]


# -- transactions and errors ---------------------------------------------------------------


def test_an_error_rolls_back_the_whole_call(
    pg: dict[str, str], schema: str, admin: psycopg.Connection[tuple[Any, ...]]
) -> None:
    admin.execute(f"CREATE TABLE {schema}.kept (id INT PRIMARY KEY)")
    script = f"""
        CREATE TABLE {schema}.fresh (id INT);
        INSERT INTO {schema}.fresh VALUES (1);
        INSERT INTO {schema}.kept VALUES (1), (2);
        INSERT INTO {schema}.kept VALUES (2)
    """
    result = run(creds(pg=pg), auth="pg", command=script)
    assert result.data is None and result.error is not None
    assert (result.error.kind, result.error.code, result.error.retryable) == (
        "db_error",
        "23505",
        False,
    )
    assert result.error.message.startswith("statement 4 of 4: duplicate key value")
    assert one(admin, f"SELECT to_regclass('{schema}.fresh') IS NULL") is True
    assert one(admin, f"SELECT count(*) FROM {schema}.kept") == 0

    bad = run(creds(pg=pg), auth="pg", command=f"SELECT * FROM {schema}.missing")
    assert bad.error is not None and (bad.error.kind, bad.error.code) == ("db_error", "42P01")
    assert bad.error.message.startswith(f'relation "{schema}.missing" does not exist')
    cast = run(creds(pg=pg), auth="pg", command="SELECT 'abc'::int")
    assert cast.error is not None and cast.error.code == "22P02"


def test_scripts_that_manage_transactions_run_in_autocommit(
    pg: dict[str, str], schema: str, admin: psycopg.Connection[tuple[Any, ...]]
) -> None:
    script = f"""
        CREATE TABLE {schema}.t (id INT);
        BEGIN;
        INSERT INTO {schema}.t VALUES (1);
        SAVEPOINT s; INSERT INTO {schema}.t VALUES (2); ROLLBACK TO SAVEPOINT s;
        COMMIT;
        VACUUM {schema}.t;
        SELECT count(*) AS n FROM {schema}.t
    """
    assert ok(run(creds(pg=pg), auth="pg", command=script))["rows"] == [{"n": 1}]
    unfinished = f"BEGIN; INSERT INTO {schema}.t VALUES (3)"  # no COMMIT: rolled back
    ok(run(creds(pg=pg), auth="pg", command=unfinished))
    assert one(admin, f"SELECT count(*) FROM {schema}.t") == 1


def test_schema_sets_the_search_path(
    pg: dict[str, str], schema: str, admin: psycopg.Connection[tuple[Any, ...]]
) -> None:
    script = """
        CREATE TABLE events (id SERIAL PRIMARY KEY, kind TEXT);
        INSERT INTO events (kind) VALUES ('a'), ('b');
        SELECT current_schema() AS s, count(*) AS n FROM events GROUP BY 1
    """
    first, second = run_many(
        creds(pg=pg),
        [
            {"auth": "pg", "schema": schema, "command": script},
            {"auth": "pg", "command": "SELECT current_schema() AS s"},  # same cached connection
        ],
    )
    assert ok(first)["rows"] == [{"s": schema, "n": 2}]
    assert ok(second)["rows"] == [{"s": "public"}]
    assert one(admin, f"SELECT count(*) FROM {schema}.events") == 2
    both = ok(run(creds(pg=pg), auth="pg", schema=[schema, "public"], command="SHOW search_path"))
    assert both["rows"] == [{"search_path": f"{schema}, public"}]


def test_dollar_quoted_function_bodies(pg: dict[str, str], schema: str) -> None:
    script = f"""
        CREATE FUNCTION {schema}.add_one(x INT) RETURNS INT AS $$
        BEGIN
          -- a ; inside the body; and 'quotes;'
          RETURN x + 1;
        END;
        $$ LANGUAGE plpgsql;
        CREATE FUNCTION {schema}.greet(who TEXT) RETURNS TEXT LANGUAGE plpgsql AS $body$
        DECLARE s TEXT := 'hello; ';
        BEGIN
          RETURN s || who || $x$;$x$;
        END;
        $body$;
        DO $$ BEGIN PERFORM 1; END $$;
        SELECT {schema}.add_one(41) AS a, {schema}.greet('bob') AS g;
    """
    assert ok(run(creds(pg=pg), auth="pg", command=script))["rows"] == [
        {"a": 42, "g": "hello; bob;"}
    ]


# -- connecting ----------------------------------------------------------------------------


def test_auth_with_aliases_and_a_string_port(pg: dict[str, str]) -> None:
    aliased = {
        "type": "postgres",
        "db_host": pg["host"],
        "db_port": pg["port"],
        "db_user": pg["user"],
        "db_password": pg["password"],
        "db_name": pg["database"],
    }
    assert isinstance(aliased["db_port"], str)
    query = "SELECT current_database() AS db, current_user AS who"
    for name, data in [("plain", pg), ("aliased", aliased)]:
        result = run(creds(**{name: data}), auth=name, command=query)
        assert ok(result)["rows"] == [{"db": pg["database"], "who": pg["user"]}]
    by_mapping = run(creds(aliased=aliased), auth={"credential": "aliased"}, command=query)
    assert ok(by_mapping)["row_count"] == 1


def test_auth_through_the_vault(pg: dict[str, str]) -> None:
    vault = Vault(MemoryStore(), new_key())
    vault.put("pg_local", "postgres", {k: v for k, v in pg.items() if k != "type"})
    result = run(vault.get, auth="pg_local", command="SELECT 1 AS one")
    assert ok(result)["rows"] == [{"one": 1}]


def test_an_unreadable_credential_is_invalid(pg: dict[str, str]) -> None:
    store = MemoryStore()
    Vault(store, new_key()).put("pg_local", "postgres", {"host": pg["host"]})
    result = run(Vault(store, new_key()).get, auth="pg_local", command="SELECT 1")
    assert result.error is not None and result.error.kind == "invalid"
    assert "'pg_local' cannot be decrypted" in result.error.message


def test_connection_string(pg: dict[str, str]) -> None:
    query = "SELECT current_database() AS db"
    assert ok(run(None, connection_string=PG_URL, command=query))["rows"] == [
        {"db": pg["database"]}
    ]
    keywords = make_conninfo(
        host=pg["host"], port=pg["port"], user=pg["user"], dbname=pg["database"]
    )
    assert ok(run(None, connection_string=keywords, command=query))["row_count"] == 1


def test_missing_or_mistyped_credentials_are_invalid(pg: dict[str, str]) -> None:
    missing = run(creds(pg=pg), auth="pg_nowhere", command="SELECT 1")
    assert missing.error is not None and missing.error.kind == "invalid"
    assert "pg_nowhere" in missing.error.message
    no_lookup = run(None, auth="pg", command="SELECT 1")
    assert no_lookup.error is not None and no_lookup.error.kind == "invalid"
    wrong = run(creds(h={"type": "http", "token": "x"}), auth="h", command="SELECT 1")
    assert wrong.error is not None and wrong.error.kind == "invalid"
    assert "type 'http'" in wrong.error.message
    bad_port = run(creds(p={**pg, "port": "54x32"}), auth="p", command="SELECT 1")
    assert bad_port.error is not None and bad_port.error.kind == "invalid"
    configs: list[dict[str, Any]] = [
        {"command": "SELECT 1"},
        {"auth": "pg"},
        {"auth": "pg", "command": " ; -- "},
        {"auth": 7, "command": "SELECT 1"},
        {"auth": "pg", "command": "SELECT 1", "schema": {"a": 1}},
    ]
    for config, result in zip(configs, run_many(creds(pg=pg), configs), strict=True):
        assert result.error is not None and result.error.kind == "invalid", config


def test_connection_failure_is_retryable_and_hides_the_password(pg: dict[str, str]) -> None:
    closed_port = {**pg, "port": "1", "password": PASSWORD}
    started = time.monotonic()
    result = run(creds(bad=closed_port), auth="bad", command="SELECT 1")
    assert time.monotonic() - started < 15
    assert result.error is not None and result.data is None
    assert (result.error.kind, result.error.retryable) == ("db_connection", True)
    assert "cannot connect" in result.error.message
    assert PASSWORD not in result.error.message

    url = f"postgresql://{pg['user']}:{PASSWORD}@{pg['host']}:1/{pg['database']}"
    result = run(None, connection_string=url, command="SELECT 1")
    assert result.error is not None and result.error.kind == "db_connection"
    assert PASSWORD not in result.error.message

    garbled = f"postgresql://{pg['user']}:{PASSWORD}@{pg['host']}:notaport/x"
    result = run(None, connection_string=garbled, command="SELECT 1")
    assert result.error is not None and result.error.kind in ("invalid", "db_connection")
    assert PASSWORD not in result.error.message


def test_wrong_password_message_hides_the_password(pg: dict[str, str]) -> None:
    result = run(
        creds(p={**pg, "user": "mp_no_such_user", "password": PASSWORD}),
        auth="p",
        command="SELECT 1",
    )
    assert result.error is not None and result.error.kind == "db_connection"
    assert PASSWORD not in result.error.message


def test_the_password_is_masked_in_results_and_errors(pg: dict[str, str]) -> None:
    if pg["password"]:
        pytest.skip("needs a server that trusts the test user (any password connects)")
    lookup = creds(p={**pg, "password": PASSWORD})
    script = "SELECT %s AS p, 'x' AS q"
    result = run(lookup, auth="p", command=script, params=[f"pw={PASSWORD}"])
    assert ok(result)["rows"] == [{"p": "pw=***", "q": "x"}]
    failed = run(lookup, auth="p", command=f"SELECT '{PASSWORD}'::int")
    assert failed.error is not None and failed.error.code == "22P02"
    assert PASSWORD not in failed.error.message and "***" in failed.error.message


def test_cached_connection_is_reused_reset_and_replaced_when_dropped(
    pg: dict[str, str], admin: psycopg.Connection[tuple[Any, ...]]
) -> None:
    async def go() -> list[base.ToolResult]:
        async with ToolRuntime(1, credentials=creds(pg=pg)) as runtime:
            pid_query = "SELECT pg_backend_pid() AS pid, current_setting('application_name') AS app"
            first = await runtime.run(
                call({"auth": "pg", "command": f"SET application_name = 'mp_x'; {pid_query}"})
            )
            second = await runtime.run(call({"auth": "pg", "command": pid_query}))
            dropped = ok(second)["rows"][0]["pid"]
            admin.execute("SELECT pg_terminate_backend(%s)", [dropped])
            gone = f"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = {int(dropped)}"
            await wait_for_async(
                lambda: one(admin, gone), "the server to let the terminated backend go", timeout=5
            )
            third = await runtime.run(call({"auth": "pg", "command": pid_query}))
            lost = await runtime.run(
                call({"auth": "pg", "command": "SELECT pg_terminate_backend(pg_backend_pid())"})
            )
            return [first, second, third, lost]

    first, second, third, lost = asyncio.run(go())
    one_, two, three = (ok(r)["rows"][0] for r in (first, second, third))
    assert one_["app"] == "mp_x" and two["app"] != "mp_x"  # DISCARD ALL between calls
    assert one_["pid"] == two["pid"] != three["pid"]
    assert lost.error is not None
    assert (lost.error.kind, lost.error.retryable) == ("db_connection", True)


def test_timeout_cancels_the_statement(
    pg: dict[str, str], admin: psycopg.Connection[tuple[Any, ...]]
) -> None:
    marker = f"mp_sleep_{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    result = run(creds(pg=pg), timeout=0.5, auth="pg", command=f"SELECT pg_sleep(30) -- {marker}")
    assert time.monotonic() - started < 10
    assert result.error is not None
    assert (result.error.kind, result.error.retryable) == ("timeout", True)
    still = (
        f"SELECT count(*) = 0 FROM pg_stat_activity WHERE query LIKE '%{marker}' "
        "AND pid <> pg_backend_pid()"
    )
    wait_for(
        lambda: one(admin, still), "the sleeping statement to be cancelled", timeout=5, interval=0.1
    )


def test_concurrent_calls(pg: dict[str, str]) -> None:
    async def go() -> list[base.ToolResult]:
        async with ToolRuntime(1, credentials=creds(pg=pg)) as runtime:
            calls = [
                runtime.run(call({"auth": "pg", "command": f"SELECT pg_sleep(0.2), {i} AS i"}))
                for i in range(6)
            ]
            return list(await asyncio.gather(*calls))

    started = time.monotonic()
    results = asyncio.run(go())
    assert [ok(r)["rows"][0]["i"] for r in results] == list(range(6))
    assert time.monotonic() - started < 1.1


# -- the NoETL fixtures --------------------------------------------------------------------


def _tool(path: str, step: str, task: str | None = None) -> dict[str, Any]:
    doc = yaml.safe_load((PLAYBOOKS / path).read_text())
    tool = next(s["tool"] for s in doc["workflow"] if s["step"] == step)
    if isinstance(tool, list):
        tool = next(t for t in tool if t["name"] == task)
    assert tool["kind"] == "postgres"
    return dict(tool)


@needs_shared
def test_save_storage_fixture_ddl(
    pg: dict[str, str], schema: str, admin: psycopg.Connection[tuple[Any, ...]]
) -> None:
    tool = _tool("save_storage_test/create_tables.yaml", "create_all_tables")
    assert "pool" in tool  # accepted and ignored
    result = run(creds(pg_local=pg), auth="pg_local", schema=schema, command=tool["command"])
    assert last(result) == {"affected_rows": 0}
    tables = admin.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1",
        [schema],
    ).fetchall()
    assert [t[0] for t in tables] == ["simple_test_flat", "simple_test_nested", "test_summary"]
    again = run(creds(pg_local=pg), auth="pg_local", schema=schema, command=tool["command"])
    assert last(again) == {"affected_rows": 0}  # IF NOT EXISTS


@needs_shared
def test_iterator_save_fixture_insert(
    pg: dict[str, str], schema: str, admin: psycopg.Connection[tuple[Any, ...]]
) -> None:
    path = "iterator_save_test/iterator_save_test.yaml"
    create = _tool(path, "create_table")["command"]
    insert = _tool(path, "process_items", "save_item")["command"]
    assert "public.iterator_save_test" in create and "public.iterator_save_test" in insert

    def mine(text: str) -> str:  # the fixture's own table, in this test's schema
        return text.replace("public.iterator_save_test", f"{schema}.iterator_save_test")

    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    xid = "424242"
    items = [("item1", 100), ("item2", 200), ("item3", 300), ("item2", 250)]
    configs = [{"auth": "pg_local", "command": mine(create)}] + [
        {
            "auth": "pg_local",
            "command": mine(
                env.from_string(insert).render(
                    execution_id=xid,
                    iter={"processed_item": {"item_name": name, "item_value": value}},
                )
            ),
        }
        for name, value in items
    ]
    results = run_many(creds(pg_local=pg), configs)
    assert [last(r) for r in results] == [{"affected_rows": 0}] + [{"affected_rows": 1}] * 4
    rows = admin.execute(
        f"SELECT id, item_name, item_value FROM {schema}.iterator_save_test "
        "WHERE execution_id = %s ORDER BY item_name",
        [xid],
    ).fetchall()
    assert rows == [
        (f"{xid}:item1", "item1", 100),
        (f"{xid}:item2", "item2", 250),
        (f"{xid}:item3", "item3", 300),
    ]
