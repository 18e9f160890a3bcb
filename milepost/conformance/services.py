"""The services a suite's entries need: the mock API started for them, PostgreSQL, DuckDB
and NATS probed, and the `${NAME}` placeholders their values fill in."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from milepost.conformance.results import one_line

PG_AUTH = "pg_local"
"""Name under which the test Postgres credential is registered (`${PG_AUTH}`)."""
KNOWN_NEEDS = ("mock_api", "postgres", "duckdb", "engine_http", "nats")
NATS_URL = "nats://127.0.0.1:4222"
"""The NATS server of `nats` entries (`${NATS_URL}`) unless `MILEPOST_NATS_URL` names one."""
_PLACEHOLDER_RE = re.compile(r"\$\{([A-Z_]+)\}")


@dataclass
class Services:
    """What the run can offer: placeholder values and, for each unmet need, why."""

    placeholders: dict[str, str]
    unavailable: dict[str, str]
    pg_url: str
    postgres: bool = False

    def missing(self, needs: list[str]) -> list[str]:
        return [f"needs {n} ({self.unavailable[n]})" for n in needs if n in self.unavailable]


@contextlib.contextmanager
def services_for(
    needed: set[str], pg_url: str, engine_url: str | None = None
) -> Iterator[Services]:
    """Start what the selected entries need (the mock API) and probe the rest."""
    placeholders = {"PG_AUTH": PG_AUTH, **pg_placeholders(pg_url)}
    unavailable: dict[str, str] = {}
    for need in sorted(needed - set(KNOWN_NEEDS)):
        unavailable[need] = "unknown service"
    server = None
    if needed & {"mock_api", "engine_http"}:
        try:
            from milepost.conformance.mock_api import MockServer

            server = MockServer().start()
        except Exception as exc:  # no mock: its entries are skipped, the rest still run
            why = f"the mock API did not start: {type(exc).__name__}: {exc}"
            unavailable.update({"mock_api": why, "engine_http": why})
        else:
            placeholders["MOCK_API_URL"] = server.url
            # the engine's own HTTP front end when running through a server; embedded
            # there is none, and README says any server whose /health answers 200 JSON
            # will do: the mock's does
            placeholders["ENGINE_URL"] = (engine_url or server.url).rstrip("/")
    if "duckdb" in needed and importlib.util.find_spec("duckdb") is None:
        unavailable["duckdb"] = "the duckdb package is not installed"
    if "nats" in needed:
        nats_url = os.environ.get("MILEPOST_NATS_URL") or NATS_URL
        placeholders["NATS_URL"] = nats_url
        why_nats = nats_unavailable(nats_url)
        if why_nats is not None:
            unavailable["nats"] = why_nats
    postgres = False
    if "postgres" in needed:
        why_not = postgres_unavailable(pg_url)
        if why_not is None:
            postgres = True
        else:
            unavailable["postgres"] = why_not
    try:
        yield Services(placeholders, unavailable, pg_url, postgres)
    finally:
        if server is not None:
            server.stop()


def postgres_unavailable(pg_url: str) -> str | None:
    """Why `postgres` entries cannot run, or None: the tool, the driver, a connection."""
    if importlib.util.find_spec("milepost.tools.postgres") is None:
        return "the postgres tool is not available yet"
    try:
        psycopg = importlib.import_module("psycopg")
    except ImportError:
        return "psycopg is not installed"
    try:
        psycopg.connect(pg_url, connect_timeout=5).close()
    except Exception as exc:
        return f"cannot connect to {redact(pg_url)}: {one_line(str(exc))}"
    return None


def nats_unavailable(url: str) -> str | None:
    """Why `nats` entries cannot run, or None: a TCP probe of the first server (nats-py
    would retry a refused connection instead of answering)."""
    parts = urlsplit(url.split(",")[0].strip())
    host, port = parts.hostname or "127.0.0.1", parts.port or 4222
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        return f"cannot connect to NATS at {redact(url)}: {one_line(str(exc))}"
    return None


def pg_placeholders(pg_url: str) -> dict[str, str]:
    parts = urlsplit(pg_url)
    user = unquote(parts.username or "postgres")
    return {
        "PG_HOST": parts.hostname or "127.0.0.1",
        "PG_PORT": str(parts.port or 5432),
        "PG_USER": user,
        "PG_PASSWORD": unquote(parts.password or ""),
        "PG_DATABASE": unquote(parts.path.lstrip("/")) or user,
    }


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def substitute(value: Any, placeholders: dict[str, str]) -> Any:
    """`value` with every known `${NAME}` replaced inside strings (keys included)."""
    if isinstance(value, str):
        return _PLACEHOLDER_RE.sub(lambda m: placeholders.get(m.group(1), m.group(0)), value)
    if isinstance(value, dict):
        return {substitute(k, placeholders): substitute(v, placeholders) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, placeholders) for v in value]
    return value
