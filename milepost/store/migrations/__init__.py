"""Versioned schema migrations, one folder per dialect: `<dialect>/NNNN_<name>.sql`.

Both folders hold the same versions and, after each version, describe the same tables
and columns (a contract test compares them); only the types are the dialect's own.
A migration is applied once, in one transaction with its `schema_version` row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_ROOT = Path(__file__).parent


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def scripts(dialect: str) -> list[Migration]:
    """The dialect's migrations in order; versions must run 1, 2, 3... without a gap."""
    found = [
        Migration(int(path.name[:4]), path.stem[5:], path.read_text(encoding="utf-8"))
        for path in sorted((_ROOT / dialect).glob("[0-9][0-9][0-9][0-9]_*.sql"))
    ]
    if not found or [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"{dialect} migrations are missing or out of order: {found!r}")
    return found
