"""`milepost run` and `resume` end with the exit codes every command uses: a database that
went away mid-run is 3 (it may pass by itself), a refusal 2."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from milepost.cli import exit_codes, runs
from milepost.engine.errors import AlreadyTerminal
from milepost.store.port import StoreUnavailable


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (StoreUnavailable("database is locked"), exit_codes.UNAVAILABLE),
        (AlreadyTerminal("execution 7 is COMPLETED"), exit_codes.REFUSED),
    ],
)
def test_a_run_ended_by_an_error_exits_with_its_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: Exception, code: int
) -> None:
    async def drive(*_: Any) -> None:
        raise error

    monkeypatch.setattr(runs, "_drive", drive)
    with pytest.raises(typer.Exit) as ended:
        runs._driven(None, None)  # type: ignore[arg-type]
    assert ended.value.exit_code == code
    assert str(error) in capsys.readouterr().err
