"""Unknown tool fields warn with the closest known field (DSL 12.2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from milepost.cli import app
from milepost.errors import PlaybookInvalid
from milepost.playbook import load

TOOLS = {
    "python": ("code: 'result = 1'", "cdoe", "code"),
    "http": ("url: http://x", "methd", "method"),
    "postgres": ("command: SELECT 1", "parms", "params"),
    "duckdb": ("query: SELECT 1", "databse", "database"),
    "shell": ("command: 'true'", "cwdd", "cwd"),
    "noop": ("", "nmae", "name"),
    "playbook": ("path: a/b", "return_stp", "return_step"),
}


def _doc(kind: str, extra: str) -> str:
    fields = ", ".join(f for f in (extra,) if f)
    return f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: t, path: t}}
workflow:
  - step: start
    tool: {{kind: {kind}{", " + fields if fields else ""}}}
"""


@pytest.mark.parametrize("kind", sorted(TOOLS))
def test_an_unknown_field_warns_with_the_closest_known_one(kind: str) -> None:
    base, typo, meant = TOOLS[kind]
    extra = ", ".join(f for f in (base, f"{typo}: 1") if f)
    playbook = load.load_text(_doc(kind, extra))
    assert any(
        f"tool field '{typo}' is not a field of {kind} (did you mean '{meant}'?)" in w
        for w in playbook.warnings
    ), playbook.warnings


def test_a_known_field_does_not_warn() -> None:
    playbook = load.load_text(_doc("http", "url: http://x, method: POST, verify_ssl: false"))
    assert playbook.warnings == ()


def test_a_field_like_no_other_has_no_suggestion() -> None:
    playbook = load.load_text(_doc("http", "url: http://x, zzzqqq: 1"))
    assert any(
        w.endswith("tool field 'zzzqqq' is not a field of http (line 6)") for w in playbook.warnings
    ), playbook.warnings


def test_a_script_without_uri_does_not_satisfy_the_required_field() -> None:
    with pytest.raises(PlaybookInvalid, match="'command' or 'query' is required"):
        load.load_text(_doc("postgres", "script: {source: {type: file}}"))


def test_validate_strict_fails_on_warnings(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(_doc("http", "url: http://x, methd: POST"))
    assert CliRunner().invoke(app, ["validate", str(file)]).exit_code == 0
    strict = CliRunner().invoke(app, ["validate", "--strict", str(file)])
    assert strict.exit_code == 1 and "did you mean 'method'" in strict.output
    assert "✓" not in strict.output and "✗" in strict.output  # a refused file says so
    assert "error (--strict):" in strict.output


def test_python_syntax_errors_are_validation_errors_with_the_line() -> None:
    with pytest.raises(PlaybookInvalid, match=r"python syntax error: .* \(line 1 of the code\)"):
        load.load_text(_doc("python", "code: 'result = ('"))
    load.load_text(_doc("python", "code: 'return 1'"))  # a top-level return is accepted


def test_run_shows_the_warnings_validate_shows(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(_doc("noop", "tmeout: 5"))  # noop has no fields: no suggestion
    ran = CliRunner().invoke(app, ["run", str(file), "--db", str(tmp_path / "m.db")])
    assert ran.exit_code == 0, ran.output
    assert "warning: step 'start': tool: tool field 'tmeout' is not a field of noop" in ran.output
