"""`--help` of every command says all its source says: rich reads `[...]` in a help string
as markup and drops it unless escaped (`\\[`), so `restart --from` lost its default and
`--user` its env. Every command and group is rendered here, wide, and each of its texts
(the docstring, each option's and argument's help) must be there word for word; no flag
reads `<bool>`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from milepost.cli import app

BORDERS = re.compile(r"[│╭╮╰╯─┃━]")


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not sub.hidden:
            yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def _words(text: str) -> str:
    """The text as the help panels hold it: borders gone, any run of blanks one space."""
    return " ".join(BORDERS.sub(" ", text).split())


def _source_texts(command: Any) -> list[str]:
    """What the source gives the command to say, as shown (an escaped `\\[` is a `[`)."""
    texts = [command.help or ""]
    texts += [getattr(param, "help", None) or "" for param in command.params]
    return [_words(text.replace("\\[", "[")) for text in texts if text.strip()]


def test_every_command_is_checked() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {
        "restart",
        "retry",
        "skip",
        "rerun",
        "logs",
        "validate",
        "register",
        "token list",
        "db upgrade",
    } <= names
    assert len(names) > 35


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(path) or "milepost" for path, _ in COMMANDS]
)
def test_help_shows_every_text_of_the_source(path: tuple[str, ...], command: Any) -> None:
    shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert "<bool>" not in shown.output
    words = _words(shown.output)
    for text in _source_texts(command):
        assert text in words, f"{' '.join(path)}: lost from --help: {text!r}"
