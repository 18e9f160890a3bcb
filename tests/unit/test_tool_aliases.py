"""NoETL's tool field aliases (DSL 12): the loader renames them to milepost's fields,
without a warning, and refuses an alias given beside the field it stands for."""

from __future__ import annotations

import pytest

from milepost.errors import PlaybookInvalid
from milepost.playbook import load, model
from tests.unit.test_load import doc


def task(tool: str) -> model.Task:
    playbook = load.load_text(doc(f"- step: start\n  tool: {tool}\n"))
    assert not playbook.warnings, playbook.warnings
    return playbook.steps["start"].tasks[0]


def problems(tool: str) -> list[str]:
    with pytest.raises(PlaybookInvalid) as info:
        load.load_text(doc(f"- step: start\n  tool: {tool}\n"))
    return info.value.problems


@pytest.mark.parametrize("alias", ["commands", "cmds", "queries", "cmd"])
def test_duckdb_aliases_of_query(alias: str) -> None:
    assert task(f"{{kind: duckdb, {alias}: 'SELECT 1'}}").config == {"query": "SELECT 1"}
    listed = task(f"{{kind: duckdb, {alias}: ['CREATE TABLE t (a INT)', 'SELECT 1']}}")
    assert listed.config == {"query": ["CREATE TABLE t (a INT)", "SELECT 1"]}


def test_duckdb_query_and_command_may_be_lists() -> None:
    assert task("{kind: duckdb, command: [SELECT 1]}").config == {"command": ["SELECT 1"]}


@pytest.mark.parametrize(
    ("tool", "also"),
    [
        ("{kind: duckdb, query: 'SELECT 1', cmds: ['SELECT 2']}", "'query'"),
        ("{kind: duckdb, command: 'SELECT 1', commands: ['SELECT 2']}", "'command'"),
        ("{kind: duckdb, commands: ['SELECT 1'], cmd: 'SELECT 2'}", "'cmd'"),
        ("{kind: shell, command: 'true', cmd: 'false'}", "'command'"),
        ("{kind: shell, cmds: ['true'], cmd: 'false'}", "'cmds'"),
        ("{kind: postgres, command: 'SELECT 1', auth: a, credential: b}", "'auth'"),
    ],
)
def test_an_alias_beside_its_field_is_an_error(tool: str, also: str) -> None:
    (problem,) = problems(tool)
    assert "is an alias of" in problem and f"also given: {also}" in problem


def test_shell_cmd_is_command_and_cmds_stays_a_list() -> None:
    assert task("{kind: shell, cmd: 'echo hi'}").config == {"command": "echo hi"}
    assert task("{kind: shell, cmds: ['echo a', 'echo b']}").config == {
        "cmds": ["echo a", "echo b"]
    }


def test_shell_needs_command_or_cmds() -> None:
    assert problems("{kind: shell, cwd: /tmp}") == [
        "step 'start': tool: field 'command' or 'cmds' is required for kind 'shell' (line 6)"
    ]


def test_http_payload_is_body_without_a_warning() -> None:
    config = task("{kind: http, url: u, method: POST, payload: {a: 1}}").config
    assert config == {"url": "u", "method": "POST", "body": {"a": 1}}
    (problem,) = problems("{kind: http, url: u, body: {a: 1}, payload: {a: 2}}")
    assert "both 'body' and its alias 'payload'" in problem


def test_http_data_stays_a_deprecated_alias_of_body() -> None:
    playbook = load.load_text(doc("- step: start\n  tool: {kind: http, url: u, data: x}\n"))
    assert playbook.steps["start"].tasks[0].config == {"url": "u", "body": "x"}
    assert any("'data' is deprecated: use 'body'" in w for w in playbook.warnings)


def test_postgres_credential_is_auth() -> None:
    config = task("{kind: postgres, credential: '{{ pg }}', command: 'SELECT 1'}").config
    assert config == {"auth": "{{ pg }}", "command": "SELECT 1"}


def test_an_alias_in_a_workbook_entry() -> None:
    text = doc(
        "- step: start\n  tool: {kind: workbook, name: q}\n",
        head="workbook:\n  - name: q\n    tool: {kind: duckdb, cmds: ['SELECT 1']}\n",
    )
    entry = load.load_text(text).workbook["q"]
    assert entry.task.config == {"query": ["SELECT 1"]}


def test_an_alias_error_names_the_alias_line() -> None:
    text = doc("- step: start\n  tool:\n    kind: shell\n    command: 'true'\n    cmd: x\n")
    with pytest.raises(PlaybookInvalid) as info:
        load.load_text(text)
    (problem,) = info.value.problems
    assert problem.endswith("(line 9)"), problem


def test_a_worker_foresees_the_credential_named_by_the_alias() -> None:
    from milepost.worker import remote_credentials

    text = doc(
        "- step: start\n  tool: {kind: postgres, credential: pg_main, command: 'SELECT 1'}\n"
    )
    playbook = load.load_text(text)
    assert remote_credentials.names_for(playbook, "start", {}) == {"pg_main"}
