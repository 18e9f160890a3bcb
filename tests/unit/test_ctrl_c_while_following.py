"""A Ctrl-C can land at any moment of `execute --wait`, even in the middle of printing its
first line (under load the run may already be going by then): from the moment the id is
known the user is told the run goes on, never left with a silent exit 130. The same for
every command that watches a run: `status --wait`, `events --follow`, `logs --follow`
(which names itself as the way to follow again)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import typer

from milepost.cli import catalog, event_log, executions, exit_codes
from milepost.cli import logs as logs_cli
from milepost.cli.output import Format, out
from milepost.engine.event_query import EventQuery


def _interrupted(*_: Any, **__: Any) -> Any:
    raise KeyboardInterrupt


class _Where:
    """A run on a server that is RUNNING, whose long reads are cut by a Ctrl-C."""

    def flags(self) -> str:
        return " --server http://s"

    def status(self, execution_id: int) -> dict[str, Any]:
        return {"execution_id": str(execution_id), "status": "RUNNING"}

    # `events`: a follow of the logs reads the log's end first, to stream from there
    wait = logs = events = _interrupted


def _said_the_run_goes_on(
    ended: pytest.ExceptionInfo[typer.Exit], capsys: pytest.CaptureFixture[str]
) -> str:
    assert ended.value.exit_code == exit_codes.INTERRUPTED
    said = capsys.readouterr().err
    assert "execution 42 goes on (nothing was cancelled)" in said
    assert "wait for it: milepost status 42 --wait --server http://s" in said
    assert "stop it: milepost cancel 42 --server http://s" in said
    return said


def test_a_ctrl_c_during_the_first_line_still_names_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(out, "print", _interrupted)
    with pytest.raises(typer.Exit) as ended:
        catalog._followed(_Where(), 42, Format.table)  # type: ignore[arg-type]
    assert ended.value.exit_code == exit_codes.INTERRUPTED
    said = capsys.readouterr().err
    assert "execution 42 goes on" in said
    assert "milepost events 42 --follow --server http://s" in said


def test_a_ctrl_c_of_status_wait_says_the_run_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as ended:
        executions.waited(_Where(), 42)  # type: ignore[arg-type]
    said = _said_the_run_goes_on(ended, capsys)
    assert said.startswith("waiting for execution 42 (RUNNING) to end")
    assert "stopped waiting; execution 42 goes on" in said


def test_a_ctrl_c_of_events_follow_says_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(event_log, "follow", _interrupted)
    with pytest.raises(typer.Exit) as ended:
        event_log._follow(_Where(), 42, EventQuery(), None, Format.table)  # type: ignore[arg-type]
    said = _said_the_run_goes_on(ended, capsys)
    assert "Follow it: milepost events 42 --follow --server http://s" in said


def test_a_ctrl_c_of_logs_follow_says_how_to_follow_its_logs_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    @contextlib.contextmanager
    def on_the_server(server: str | None, db: str | None) -> Iterator[_Where]:
        yield _Where()

    monkeypatch.setattr(logs_cli, "runs", on_the_server)
    with pytest.raises(typer.Exit) as ended:
        logs_cli.logs(
            42,
            db=None,
            server="http://s",
            step="load data",
            follow=True,
            output=None,
            json_out=False,
        )
    said = _said_the_run_goes_on(ended, capsys)
    assert "stopped following its logs; execution 42 goes on" in said
    assert "Follow it: milepost logs 42 --step 'load data' --follow --server http://s" in said
