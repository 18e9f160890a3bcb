"""The statements of a postgres tool call: the parameters each takes, whether the script
needs autocommit, and the `search_path` it sets."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import sql as pg_sql
from psycopg.types.json import Json

from milepost.tools import sql
from milepost.tools.postgres.params import ToolInvalid

_PLACEHOLDER = re.compile(r"%%|%\(([^)]+)\)[sbt]|%[sbt]")
"""psycopg's placeholders: `%s`, `%b`, `%t`, `%(name)s`; `%%` is a literal `%`."""
_NO_TRANSACTION = re.compile(
    r"^\s*(?:VACUUM|CREATE\s+DATABASE|DROP\s+DATABASE|ALTER\s+SYSTEM|CREATE\s+TABLESPACE"
    r"|DROP\s+TABLESPACE|(?:CREATE|DROP|REINDEX)\b.*\bCONCURRENTLY\b)",
    re.IGNORECASE | re.DOTALL,
)


def placeholders(statement: str) -> tuple[int, set[str]]:
    """Positional placeholder count and placeholder names, as psycopg reads them."""
    count, names = 0, set()
    for match in _PLACEHOLDER.finditer(statement):
        if match.group(0) == "%%":
            continue
        if match.group(1) is None:
            count += 1
        else:
            names.add(match.group(1))
    return count, names


def bind_params(statements: list[str], params: Any) -> list[tuple[str, Any]]:
    """Each statement with the parameters it takes (None: run without parameters)."""
    if params is None or (isinstance(params, list | tuple | Mapping) and not params):
        return [(s, None) for s in statements]
    if isinstance(params, Mapping):
        values = {str(k): _adapt(v) for k, v in params.items()}
        return [(s, values if placeholders(s)[1] else None) for s in statements]
    if isinstance(params, str | bytes) or not isinstance(params, Sequence):
        params = [params]
    flat = [_adapt(v) for v in params]
    counts = [placeholders(s)[0] for s in statements]
    if sum(counts) != len(flat):
        raise ToolInvalid(
            f"postgres `params` has {len(flat)} value(s) but the statements hold "
            f"{sum(counts)} `%s` placeholder(s)"
        )
    chunks: list[tuple[str, Any]] = []
    offset = 0
    for statement, n in zip(statements, counts, strict=True):
        chunks.append((statement, flat[offset : offset + n] if n else None))
        offset += n
    return chunks


def _adapt(value: Any) -> Any:
    """Mappings (and lists holding any) go as JSON; other values as psycopg adapts them."""
    if isinstance(value, Mapping) or (
        isinstance(value, list | tuple) and any(isinstance(v, Mapping) for v in value)
    ):
        return Json(value)
    return value


def search_path(schema: Any) -> list[str] | None:
    if schema is None or schema == "":
        return None
    names = schema.split(",") if isinstance(schema, str) else schema
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise ToolInvalid("postgres `schema` must be a name or a list of names")
    cleaned = [n.strip() for n in names if n.strip()]
    return cleaned or None


def set_search_path(schema: list[str], *, local: bool) -> pg_sql.Composed:
    return pg_sql.SQL("SET {} search_path TO {}").format(
        pg_sql.SQL("LOCAL" if local else "SESSION"),
        pg_sql.SQL(", ").join(pg_sql.Identifier(name) for name in schema),
    )


def needs_autocommit(statements: list[str]) -> bool:
    """True if the script manages transactions or cannot run inside a transaction block."""
    for statement in statements:
        keyword = sql.first_keyword(statement)
        if keyword in sql.TRANSACTION_KEYWORDS:
            if keyword == "ROLLBACK" and re.match(
                r"\s*ROLLBACK\s+(?:WORK\s+|TRANSACTION\s+)?TO\b",
                sql.strip_comments(statement),
                re.IGNORECASE,
            ):
                continue  # ROLLBACK TO SAVEPOINT stays inside the transaction
            return True
        if _NO_TRANSACTION.match(sql.strip_comments(statement)):
            return True
    return False
