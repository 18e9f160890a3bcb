"""A Ctrl-C can land at any moment of `execute --wait`, even in the middle of printing its
first line (under load the run may already be going by then): from the moment the id is
known the user is told the run goes on, never left with a silent exit 130."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from milepost.cli import catalog, exit_codes
from milepost.cli.output import Format, out


class _Where:
    def flags(self) -> str:
        return " --server http://s"


def test_a_ctrl_c_during_the_first_line_still_names_the_run(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    def interrupted(*_: Any, **__: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(out, "print", interrupted)
    with pytest.raises(typer.Exit) as ended:
        catalog._followed(_Where(), 42, Format.table)  # type: ignore[arg-type]
    assert ended.value.exit_code == exit_codes.INTERRUPTED
    said = capsys.readouterr().err
    assert "execution 42 goes on" in said
    assert "milepost events 42 --follow --server http://s" in said
