"""`script: {uri, source: {type: file}}` (DSL 12): read beside the playbook's file and
stored inline, so the registered text is self-contained."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from milepost.cli import app, inputs
from milepost.errors import PlaybookInvalid
from milepost.playbook import load, scripts
from milepost.playbook.yamllines import Limits

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: s, path: s}\n"


def _playbook(tmp_path: Path, tool: str) -> Path:
    path = tmp_path / "pb.yaml"
    path.write_text(HEAD + "workflow:\n- step: start\n  tool:\n" + tool, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("kind", "field", "extra"),
    [("postgres", "command", "    auth: pg\n"), ("duckdb", "query", ""), ("python", "code", "")],
)
def test_file_script_becomes_the_kinds_field(
    tmp_path: Path, kind: str, field: str, extra: str
) -> None:
    (tmp_path / "sql").mkdir()
    body = "result = {'a': 1}\n" if kind == "python" else "SELECT 1;\nSELECT 2;\n"
    (tmp_path / "sql" / "load.x").write_text(body, encoding="utf-8")
    path = _playbook(
        tmp_path,
        f"    kind: {kind}\n{extra}    script: {{uri: sql/load.x, source: {{type: file}}}}\n",
    )
    playbook = load.load_file(path)
    assert playbook.steps["start"].tasks[0].config[field] == body
    assert "script" not in playbook.steps["start"].tasks[0].config
    text = scripts.inline_text(
        path.read_text(encoding="utf-8"), tmp_path, str(path), limits=Limits.of()
    )
    tool = yaml.safe_load(text)["workflow"][0]["tool"]
    assert tool[field] == body and "script" not in tool  # the stored text holds it
    load.load_text(text)  # self-contained: loads with no file at hand


def test_missing_file_names_its_path(tmp_path: Path) -> None:
    path = _playbook(
        tmp_path, "    kind: duckdb\n    script: {uri: sql/nope.sql, source: {type: file}}\n"
    )
    with pytest.raises(PlaybookInvalid) as info:
        load.load_file(path)
    assert str(tmp_path / "sql" / "nope.sql") in info.value.message
    assert "workflow[0].tool.script.uri" in info.value.message


@pytest.mark.parametrize("type_", ["gcs", "s3", "http"])
def test_other_sources_are_rejected_by_type(tmp_path: Path, type_: str) -> None:
    path = _playbook(
        tmp_path,
        f"    kind: postgres\n    auth: pg\n    script: {{uri: a.sql, source: {{type: {type_}}}}}\n",
    )
    with pytest.raises(PlaybookInvalid) as info:
        load.load_file(path)
    assert f"script source type {type_!r} is not supported" in info.value.message
    assert "is required" not in info.value.message


def test_file_script_without_a_file_is_an_error() -> None:
    text = HEAD + (
        "workflow:\n- step: start\n  tool:\n    kind: python\n"
        "    script: {uri: py/t.py, source: {type: file}}\n"
    )
    with pytest.raises(PlaybookInvalid) as info:
        load.load_text(text)
    msg = info.value.message
    assert "'py/t.py'" in msg and "not loaded from a file" in msg
    assert "only 'script" not in msg and "is required" not in msg


def test_text_without_file_scripts_is_kept_as_written(tmp_path: Path) -> None:
    text = HEAD + "# comment\nworkflow:\n- step: start\n  tool: {kind: python, code: 'x=1'}\n"
    assert scripts.inline_text(text, tmp_path, limits=Limits.of()) is text


def test_inline_python_script_still_works() -> None:
    text = HEAD + (
        "workflow:\n- step: start\n  tool:\n    kind: python\n"
        "    script: {source: {type: inline, code: 'result = 1'}}\n"
    )
    assert load.load_text(text).steps["start"].tasks[0].config["code"] == "result = 1"


class _Client:
    """Stands for the server: keeps the text `register` sends."""

    sent: list[str] = []

    def __init__(self, server: object) -> None: ...

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *exc: object) -> None: ...

    def register(self, text: str) -> dict[str, object]:
        self.sent.append(text)
        return {"path": "s", "version": 1}


def test_register_sends_the_inlined_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "t.py").write_text("result = 1\n", encoding="utf-8")
    path = _playbook(tmp_path, "    kind: python\n    script: {uri: t.py, source: {type: file}}\n")
    monkeypatch.setattr(inputs, "MilepostClient", _Client)  # where `server_client` makes it
    done = CliRunner().invoke(app, ["register", str(path), "--server", "http://127.0.0.1:9"])
    assert done.exit_code == 0, done.output
    (sent,) = _Client.sent
    assert yaml.safe_load(sent)["workflow"][0]["tool"]["code"] == "result = 1\n"


def test_validate_names_the_missing_file(tmp_path: Path) -> None:
    path = _playbook(
        tmp_path, "    kind: duckdb\n    script: {uri: gone.sql, source: {type: file}}\n"
    )
    done = CliRunner().invoke(app, ["validate", str(path)])
    assert done.exit_code != 0
    assert "gone.sql" in done.output
