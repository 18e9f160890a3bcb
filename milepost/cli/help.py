"""How `--help` reads: flags without a type (typer writes `--wait <bool>`, as if the flag
took a value), every other option with its type and default."""

from __future__ import annotations

from typing import Any

from typer import core


def quiet_flags() -> None:
    """Show no type for flags (`--json`, `--wait`, `--help`), whatever the typer version."""
    shown = core.TyperOption.display_type_rich
    if getattr(shown, "quiet_flags", False):
        return

    def display_type_rich(self: core.TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    marked: Any = display_type_rich
    marked.quiet_flags = True
    setattr(core.TyperOption, "display_type_rich", display_type_rich)  # noqa: B010
